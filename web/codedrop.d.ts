// Types of codedrop.js, the browser client of codedrop's claim_api.

/**
 * Where the shopper is in the sale.
 * - `loading`: the campaign is being read.
 * - `not_started`: the sale opens at `campaign.starts_at`; `startsInMs` counts down (updated
 *   every second).
 * - `ready`: the sale is open and the shopper can claim.
 * - `paused`: the marketer paused the sale; a claim asked for resumes when it reopens.
 * - `claiming`: a claim is on its way (retries included).
 * - `waiting`: the shopper is in the waiting room; `waiting` holds the estimate.
 * - `claimed`: `code` is the shopper's (also after a reload).
 * - `sold_out`: no code is left.
 * - `ended`: the sale is over.
 * - `error`: `error` says what went wrong; `claim()` tries again with the same Idempotency-Key.
 */
export type Status =
  | "loading"
  | "not_started"
  | "ready"
  | "paused"
  | "claiming"
  | "waiting"
  | "claimed"
  | "sold_out"
  | "ended"
  | "error";

export declare const STATUSES: readonly Status[];

/** `GET /v1/campaigns/{campaign_id}` (claim_api), as the server sends it. */
export interface PublicCampaign {
  campaign_id: string;
  title: string;
  /** RFC 3339 UTC. */
  starts_at: string;
  /** RFC 3339 UTC. */
  ends_at: string;
  status: "scheduled" | "active" | "paused" | "ended" | "sold_out";
  remaining: number;
  /** How many codes one shopper (account, phone or email, as `identity` says) may hold. */
  max_per_user: number;
  /** A fair drop: shoppers join its pre-queue from then (RFC 3339 UTC) until `starts_at`. */
  pre_queue_opens_at?: string | null;
  waiting_room?: {
    enabled: boolean;
    /** Shoppers are waiting right now; a new arrival would wait about `estimated_wait_seconds`. */
    engaged: boolean;
    estimated_wait_seconds: number;
  };
}

/** A claim as `POST …/claims` and `GET …/claims/me` return it. */
export interface Claim {
  claim_id: string;
  code: string;
  /** RFC 3339 UTC. */
  claimed_at: string;
  campaign_id?: string;
  user_id?: string;
  /** Campaigns with holds: `"held"`, `"claimed"` or `"redeemed"`. */
  state?: string;
  /** RFC 3339 UTC when a hold is released, or null. */
  expires_at?: string | null;
}

export interface WaitingInfo {
  /** The server's estimate of the wait, or null when it cannot tell. */
  estimatedWaitSeconds: number | null;
  /** When the client asks again (the server's `retry_after_ms`). */
  retryInMs: number;
  /** Epoch ms when this shopper entered the waiting room (on this page). */
  since: number;
}

export interface ErrorInfo {
  /** The API's `error_code` (e.g. `CAMPAIGN_NOT_FOUND`, `UNAUTHENTICATED`, `IDENTITY_REQUIRED`,
   * `REQUEST_VALIDATION_FAILED`, `CONTENDED`) or the client's own: `SIGN_IN_REQUIRED`,
   * `NETWORK_ERROR`, `UNEXPECTED_RESPONSE`, `UNEXPECTED_ERROR`. */
  code: string;
  /** Human text, fit to show the shopper. */
  message: string;
  /** The HTTP status, or null for a network failure or a client-side error. */
  status: number | null;
  /** Whether calling `claim()` again can succeed without anything else changing. */
  retryable: boolean;
}

export interface State {
  status: Status;
  campaignId: string;
  campaign: Readonly<PublicCampaign> | null;
  remaining: number | null;
  /** Milliseconds until the sale opens, while `status` is `not_started`; otherwise null. */
  startsInMs: number | null;
  /** The shopper's newest claim once `claimed`. */
  claim: Readonly<Claim> | null;
  /** Every claim the shopper holds in this campaign (newest last). */
  claims: readonly Readonly<Claim>[];
  /** `claim.code`, for convenience. */
  code: string | null;
  waiting: Readonly<WaitingInfo> | null;
  error: Readonly<ErrorInfo> | null;
  /** A fair drop's entry of this shopper, once joined or seen in the waiting room. */
  entry: Readonly<Entry> | null;
}

/** A fair drop's entry (docs/fair-drops.md): its id, and its drawn place once the drop starts. */
export interface Entry {
  entryId: string;
  place: number | null;
}

/** Epoch milliseconds and an abortable sleep (injected by tests; the default uses timers). */
export interface Clock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The subset of the Web Storage API the client needs. */
export interface KeyValueStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export interface CodedropOptions {
  /** claim_api's base URL, e.g. `https://europe-west1-PROJECT.cloudfunctions.net/claim_api`. */
  apiBase: string;
  campaignId: string;
  /** The signed-in shopper's Firebase ID token, or null when nobody is signed in. Called with
   * `true` once after a 401, to get a fresh token (Firebase: `user.getIdToken(forceRefresh)`). */
  getIdToken(forceRefresh?: boolean): Promise<string | null> | string | null;
  /** Called by `claim()` when `getIdToken()` gives no token: sign the shopper in (anonymously,
   * or open your phone sign-in). Without it, such a claim ends in `error` `SIGN_IN_REQUIRED`. */
  signIn?(): Promise<unknown>;
  /** A Firebase App Check token, sent as `X-Firebase-AppCheck` (campaigns with
   * `require_app_check`). */
  getAppCheckToken?(): Promise<string | null> | string | null;
  /** How often the campaign (stock, status, the end of the sale) is read again while the
   * shopper looks; default 10,000 ms. 0: never in the background (the countdown still opens
   * the sale, and a claim finds out the rest). */
  refreshIntervalMs?: number;
  /** Retries of network errors, 5xx and 503 `CONTENDED` before `error`; default 5. The
   * waiting room is not a failure and never runs out. */
  maxRetries?: number;
  /** Exponential backoff with full jitter: attempt n waits up to base × 2^(n-1), capped; never
   * less than `Retry-After`. Defaults 500 and 15,000 ms. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** Per request; default 15,000 ms. */
  requestTimeoutMs?: number;
  /** A stored waiting-room ticket older than this is dropped (the server's tickets live an
   * hour); default 3,600,000 ms. */
  pendingMaxAgeMs?: number;
  /** `fetch` credentials mode; default `"omit"` (the ticket travels in a header, which works
   * where third-party cookies are blocked). `"include"` also sends the ticket cookie. */
  credentials?: RequestCredentials;
  /** Where the Idempotency-Key and ticket of a claim in progress survive a reload; default
   * `localStorage` (in memory when it is unavailable). Keyed by campaign and shopper. */
  storage?: KeyValueStorage;
  fetch?: typeof fetch;
  clock?: Clock;
  /** A number in [0, 1) for jitter; default Math.random. */
  random?: () => number;
}

export declare class CodedropError extends Error {
  code: string;
  status: number | null;
  retryable: boolean;
  constructor(
    code: string,
    message: string,
    options?: { status?: number | null; retryable?: boolean },
  );
}

export declare class Codedrop {
  constructor(options: CodedropOptions);
  /** The current state (a frozen snapshot). */
  readonly state: Readonly<State>;
  /** Call `listener(state)` now and on every change; returns the unsubscribe function. */
  subscribe(listener: (state: Readonly<State>) => void): () => void;
  /** Load the campaign, find a code already held, resume a claim a reload cut short, and keep
   * the state fresh until `stop()`. Resolves with the state once loaded. */
  start(): Promise<Readonly<State>>;
  /** Claim a code. A call while a claim runs returns the same promise (a double click sends
   * one claim). Resolves with the state the claim ended in; never rejects. */
  claim(): Promise<Readonly<State>>;
  /** Join a fair drop's pre-queue; joining again answers the same entry (with its place once
   * drawn). Rejects with a CodedropError (e.g. `CAMPAIGN_NOT_ACTIVE` outside the pre-queue). */
  join(): Promise<Readonly<Entry>>;
  /** The public proof of a fair drop's draw (`…/fairness`). */
  readonly proofUrl: string;
  /** Stop every timer and request. */
  stop(): void;
}

export declare function createCodedrop(options: CodedropOptions): Codedrop;
export declare const systemClock: Clock;
export declare function memoryStorage(): KeyValueStorage;
/** The `user_id` (or `sub`) inside a JWT, unverified; null if it cannot be read. */
export declare function tokenUserId(token: string): string | null;
/** Milliseconds a `Retry-After` value asks for (seconds or an HTTP date), or null. */
export declare function parseRetryAfter(
  value: string | null | undefined,
  nowMs: number,
): number | null;

/** A campaign's code format (admin_api's `code_format`); a bare pattern means the default
 * alphabet and no check character. */
export interface CodeFormat {
  pattern: string;
  alphabet?: string;
  check?: "luhn_mod_n" | null;
}
export declare const CODE_ALPHABET: string;
export declare function canonicalCode(code: string): string;
export declare function luhnValid(text: string, alphabet?: string): boolean;
export declare function fitCode(typed: string, format: CodeFormat | string): string | null;
export declare function isWellFormed(code: string, format: CodeFormat | string): boolean;
