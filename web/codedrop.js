// codedrop.js: the browser client of codedrop's claim_api, for flash-sale landing pages.
//
// An ES module with no dependencies. It signs nothing itself: the page passes getIdToken()
// (Firebase Auth or any provider) and, optionally, getAppCheckToken(). It walks the shopper
// through the sale (countdown, waiting room, claim, code, sold out, ended), keeps one
// Idempotency-Key per claim across retries and reloads, honours Retry-After, resends the
// waiting-room ticket, and finds a code already held after a reload. Types: codedrop.d.ts.

// Types are codedrop.d.ts's (the compiler resolves "./codedrop.js" to it); `tsc -p web` holds
// this file to them.
/** @import * as Declared from "./codedrop.js" */
/** @import { Claim, Clock, CodedropOptions, Entry, KeyValueStorage } from "./codedrop.js" */
/** @import { PublicCampaign, State, Status } from "./codedrop.js" */

// What the client keeps of one response, whose body is untrusted JSON (null if not JSON).
/** @typedef {{ status: number, headers: Headers, body: any }} ApiResponse */
// A claim in progress: its Idempotency-Key and waiting-room ticket, kept across reloads.
/** @typedef {{ key: string, ticket: string | null, startedAt: number }} Pending */
// What one claim has spent of its retries.
/** @typedef {{ failures: number, refreshedToken: boolean, droppedTicket: boolean }} Retry */

const VERSION_PREFIX = "codedrop:v1";

/**
 * Every status a page may render, in the order a shopper usually meets them.
 * @type {typeof Declared.STATUSES}
 */
export const STATUSES = Object.freeze([
  "loading",
  "not_started",
  "ready",
  "paused",
  "claiming",
  "waiting",
  "claimed",
  "sold_out",
  "ended",
  "error",
]);

const DEFAULTS = Object.freeze({
  refreshIntervalMs: 10_000,
  maxRetries: 5,
  backoffBaseMs: 500,
  backoffMaxMs: 15_000,
  requestTimeoutMs: 15_000,
  pendingMaxAgeMs: 60 * 60 * 1000,
});

// Statuses the campaign document decides; the claim flow owns the others, and a claim's error
// stays until the shopper acts on it.
const BROWSING = new Set(["loading", "not_started", "ready", "paused", "sold_out", "ended"]);

/**
 * The system clock: epoch milliseconds and an abortable sleep.
 * @type {Clock}
 */
export const systemClock = Object.freeze({
  now: () => Date.now(),
  /** @type {Clock["sleep"]} */
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = setTimeout(done, Math.max(0, ms));
      signal?.addEventListener("abort", done, { once: true });
      function done() {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        resolve();
      }
    }),
});

/**
 * A Storage that forgets on reload, for pages (or tests) without localStorage.
 * @type {typeof Declared.memoryStorage}
 */
export function memoryStorage() {
  /** @type {Map<string, string>} */
  const items = new Map();
  return {
    getItem: (key) => items.get(key) ?? null,
    setItem: (key, value) => void items.set(key, String(value)),
    removeItem: (key) => void items.delete(key),
  };
}

/** @returns {KeyValueStorage} */
function defaultStorage() {
  try {
    const storage = globalThis.localStorage;
    if (storage) {
      const probe = `${VERSION_PREFIX}:probe`;
      storage.setItem(probe, "1");
      storage.removeItem(probe);
      return storage;
    }
  } catch {
    // Storage disabled (privacy mode, sandboxed iframe): retries still work within the page.
  }
  return memoryStorage();
}

function newIdempotencyKey() {
  const crypto = globalThis.crypto;
  if (crypto?.randomUUID) return crypto.randomUUID();
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The user id inside a JWT (not verified: it only names the shopper's storage slot).
 * @type {typeof Declared.tokenUserId}
 */
export function tokenUserId(token) {
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const padded = payload + "=".repeat((4 - (payload.length % 4)) % 4);
    const bytes = Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
    const claims = JSON.parse(new TextDecoder().decode(bytes));
    return String(claims.user_id ?? claims.sub ?? "") || null;
  } catch {
    return null;
  }
}

/**
 * Milliseconds a Retry-After header asks for (delta-seconds or an HTTP date), or null.
 * @type {typeof Declared.parseRetryAfter}
 */
export function parseRetryAfter(value, nowMs) {
  if (value == null || value === "") return null;
  const trimmed = String(value).trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? null : Math.max(0, at - nowMs);
}

// --- code patterns (the same rules as shared/codes.py; docs/codes.md) ---------------------------

/**
 * Letters and digits a shopper cannot confuse when typing a code: no 0/O, 1/I/L.
 * @type {typeof Declared.CODE_ALPHABET}
 */
export const CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789";

const DASHES = /[\u2010-\u2015\u2212\ufe63]/g;
const INVISIBLE = /[\s\p{Cc}\p{Cf}]/gu;

/** A code as it is matched: NFKC, upper case, typographic dashes as "-", no spaces or invisible
 * characters ("spring-93630d12" is "SPRING-93630D12").
 * @type {typeof Declared.canonicalCode}
 */
export function canonicalCode(code) {
  return String(code).normalize("NFKC").toUpperCase().replace(DASHES, "-").replace(INVISIBLE, "");
}

/**
 * @param {number[]} values
 * @param {number} n
 * @param {boolean} doubleLast
 */
function luhnSum(values, n, doubleLast) {
  // Luhn mod N; for an odd N doubling is modulo N (see shared/codes.py for why).
  let total = 0;
  let double = doubleLast;
  for (let i = values.length - 1; i >= 0; i -= 1) {
    const value = values[i];
    total += double
      ? n % 2 === 0
        ? Math.floor((2 * value) / n) + ((2 * value) % n)
        : (2 * value) % n
      : value;
    double = !double;
  }
  return total % n;
}

/**
 * Whether `text` ends with its Luhn mod N check character over `alphabet`.
 * @type {typeof Declared.luhnValid}
 */
export function luhnValid(text, alphabet = CODE_ALPHABET) {
  const values = Array.from(text, (char) => alphabet.indexOf(char));
  return values.length > 0 && !values.includes(-1) && luhnSum(values, alphabet.length, false) === 0;
}

/** The code `typed` stands for in the exact form of `format` ({pattern, alphabet?, check?}, as
 * a campaign's `code_format`, or just the pattern string: "#" one alphabet character), forgiving
 * case, spaces and dashes; null when no code of the format can be it.
 * @type {typeof Declared.fitCode}
 */
export function fitCode(typed, format) {
  const {
    pattern,
    alphabet = CODE_ALPHABET,
    check = null,
  } = typeof format === "string" ? { pattern: format } : format;
  const text = canonicalCode(typed).replace(/-/g, "");
  /** @type {string[]} */
  const out = [];
  /** @type {string[]} */
  const random = [];
  let at = 0;
  for (const slot of pattern) {
    if (slot === "-") {
      out.push("-");
      continue;
    }
    const char = text[at];
    if (char === undefined) return null;
    if (slot === "#") {
      if (!alphabet.includes(char)) return null;
      random.push(char);
    } else if (char !== slot) {
      return null;
    }
    out.push(char);
    at += 1;
  }
  if (at !== text.length) return null;
  if (check === "luhn_mod_n" && !luhnValid(random.join(""), alphabet)) return null;
  return out.join("");
}

/** Whether `code` (as typed) can be a code of `format` (see fitCode): a checkout can refuse a
 * typo before asking the API, which would answer 400 CODE_MALFORMED.
 * @type {typeof Declared.isWellFormed}
 */
export function isWellFormed(code, format) {
  return fitCode(code, format) !== null;
}

/** An error the claim flow could not get past; `code` is the API's error_code or the client's. */
export class CodedropError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{ status?: number | null, retryable?: boolean }} [options]
   */
  constructor(code, message, { status = null, retryable = false } = {}) {
    super(message);
    this.name = "CodedropError";
    this.code = code;
    this.status = status;
    this.retryable = retryable;
  }
}

class NetworkError extends Error {}

/** @type {Record<string, string>} */
const MESSAGES = {
  SIGN_IN_REQUIRED: "Sign in to claim your code.",
  NETWORK_ERROR: "We could not reach the sale. Check your connection and try again.",
  UNEXPECTED_RESPONSE: "Something went wrong on our side. Please try again.",
  UNEXPECTED_ERROR: "Something went wrong. Please try again.",
};

/**
 * Create a client for one campaign. See codedrop.d.ts for every option and the state.
 * @type {typeof Declared.createCodedrop}
 */
export function createCodedrop(options) {
  return new Codedrop(options);
}

/** @implements {Declared.Codedrop} */
export class Codedrop {
  /** @type {Required<Pick<CodedropOptions, keyof typeof DEFAULTS>> & CodedropOptions} */
  #options;
  /** @type {typeof fetch} */
  #fetch;
  /** @type {Clock} */
  #clock;
  /** @type {() => number} */
  #random;
  /** @type {KeyValueStorage} */
  #storage;
  /** @type {Set<(state: Readonly<State>) => void>} */
  #listeners = new Set();
  /** @type {Readonly<State>} */
  #state;
  #abort = new AbortController();
  /** @type {Promise<Readonly<State>> | null} */
  #startPromise = null;
  /** @type {Promise<Readonly<State>> | null} */
  #claimPromise = null;
  #wantsClaim = false;
  #watching = false;
  #campaignFailures = 0;

  /** @param {CodedropOptions} options */
  constructor(options) {
    if (!options?.apiBase) throw new TypeError("createCodedrop: apiBase is required");
    if (!options.campaignId) throw new TypeError("createCodedrop: campaignId is required");
    if (typeof options.getIdToken !== "function") {
      throw new TypeError("createCodedrop: getIdToken must be a function");
    }
    this.#options = { ...DEFAULTS, ...options, apiBase: options.apiBase.replace(/\/+$/, "") };
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#storage = options.storage ?? defaultStorage();
    this.#state = Object.freeze({
      status: "loading",
      campaignId: options.campaignId,
      campaign: null,
      remaining: null,
      startsInMs: null,
      claim: null,
      claims: [],
      code: null,
      waiting: null,
      error: null,
      entry: null,
    });
  }

  /** Where anyone can check a fair drop's draw (its commitment, digest, seed and places). */
  get proofUrl() {
    return this.#url("/fairness");
  }

  /** Join a fair drop's pre-queue (campaign.pre_queue_opens_at): resolves with the entry,
   * `{entryId, place}` (place once drawn), also kept in state.entry. Joining again answers the
   * same entry, so a page may call it after a reload to show it. */
  async join() {
    const token = await this.#signedInToken(false);
    const headers = { ...(await this.#authHeaders(token)), "Content-Type": "application/json" };
    const response = await this.#request("POST", this.#url("/entries"), headers, "{}");
    if (response.status !== 200 && response.status !== 201) {
      throw apiError(response, { retryable: response.status >= 500 });
    }
    this.#setEntry(response.body);
    return /** @type {Readonly<Entry>} */ (this.#state.entry);
  }

  /** @param {any} body */
  #setEntry(body) {
    if (!body?.entry_id) return;
    const place = Number.isInteger(body.place) ? body.place : (this.#state.entry?.place ?? null);
    const known = this.#state.entry;
    if (known && known.entryId === body.entry_id && known.place === place) return;
    this.#set({ entry: Object.freeze({ entryId: body.entry_id, place }) });
  }

  /** The current state (a frozen snapshot). */
  get state() {
    return this.#state;
  }

  /**
   * Call `listener(state)` now and on every change; returns the unsubscribe function.
   * @param {(state: Readonly<State>) => void} listener
   */
  subscribe(listener) {
    this.#listeners.add(listener);
    listener(this.#state);
    return () => void this.#listeners.delete(listener);
  }

  /** Load the campaign, find a code the shopper already holds, resume a claim a reload cut
   * short, and keep the state fresh (countdown, stock) until stop(). */
  start() {
    this.#startPromise ??= this.#start();
    return this.#startPromise;
  }

  /** Claim a code (the button). A second call while one runs returns the same promise, so a
   * double click sends one claim. Resolves with the state the claim ended in. */
  claim() {
    if (this.#claimPromise) return this.#claimPromise;
    if (this.#state.status === "claimed") return Promise.resolve(this.#state);
    this.#wantsClaim = true;
    this.#set({ status: "claiming", error: null, waiting: null });
    this.#claimPromise = this.#runClaim().finally(() => {
      this.#claimPromise = null;
      this.#ensureWatch(); // a claim can end in a countdown (the sale had not opened)
    });
    return this.#claimPromise;
  }

  /** Stop every timer and request loop (the page is going away). */
  stop() {
    this.#abort.abort();
  }

  get #stopped() {
    return this.#abort.signal.aborted;
  }

  // --- state ---------------------------------------------------------------------------------

  /** @param {Partial<State>} changes */
  #set(changes) {
    const next = { ...this.#state, ...changes };
    const campaign = next.campaign;
    next.startsInMs =
      next.status === "not_started" && campaign
        ? Math.max(0, Date.parse(campaign.starts_at) - this.#clock.now())
        : null;
    this.#state = Object.freeze(next);
    for (const listener of this.#listeners) {
      try {
        listener(this.#state);
      } catch (error) {
        // A page's rendering bug must not stop the claim.
        console.error("codedrop: a state listener failed", error);
      }
    }
  }

  /** @param {unknown} error */
  #fail(error) {
    const known = error instanceof CodedropError;
    if (!known) console.error("codedrop: the claim failed", error);
    const code = known ? error.code : "UNEXPECTED_ERROR";
    this.#set({
      status: "error",
      waiting: null,
      error: Object.freeze({
        code,
        // Only the API's own messages reach the shopper; others are logged above.
        message: (known && error.message) || MESSAGES[code] || MESSAGES.UNEXPECTED_ERROR,
        status: known ? error.status : null,
        retryable: known ? error.retryable : true,
      }),
    });
  }

  // The server's clock decides: ours only tells when to ask again.
  /**
   * @param {PublicCampaign} campaign
   * @returns {Status}
   */
  #statusOf(campaign) {
    if (campaign.status === "ended") return "ended";
    if (campaign.status === "paused") return "paused";
    if (campaign.status === "sold_out") return "sold_out";
    if (campaign.status === "scheduled") return "not_started";
    return "ready";
  }

  /** @param {PublicCampaign} campaign */
  #applyCampaign(campaign) {
    /** @type {Partial<State>} */
    const changes = { campaign: Object.freeze(campaign), remaining: campaign.remaining ?? null };
    const status = this.#statusOf(campaign);
    // The claim flow owns the state while it runs; a code already shown stays shown.
    const { status: now, campaign: known } = this.#state;
    if (!this.#claimPromise && (BROWSING.has(now) || (now === "error" && !known))) {
      Object.assign(changes, { status, error: null });
    }
    this.#set(changes);
    if (status === "ready" && this.#wantsClaim && !this.#claimPromise && this.#pending()) {
      void this.claim(); // the shopper asked before the sale opened, or before a reload
    }
  }

  // --- HTTP ----------------------------------------------------------------------------------

  #url(suffix = "") {
    return `${this.#options.apiBase}/v1/campaigns/${encodeURIComponent(this.#options.campaignId)}${suffix}`;
  }

  /**
   * @param {string} method
   * @param {string} url
   * @param {Record<string, string>} [headers]
   * @param {string} [body]
   * @returns {Promise<ApiResponse>}
   */
  async #request(method, url, headers = {}, body = undefined) {
    const timeout = new AbortController();
    const onStop = () => timeout.abort();
    this.#abort.signal.addEventListener("abort", onStop, { once: true });
    const timer = setTimeout(() => timeout.abort(), this.#options.requestTimeoutMs);
    let response;
    try {
      response = await this.#fetch(url, {
        method,
        headers,
        body,
        mode: "cors",
        credentials: this.#options.credentials ?? "omit",
        signal: timeout.signal,
      });
      const text = await response.text();
      let json = null;
      try {
        json = text ? JSON.parse(text) : null;
      } catch {
        json = null; // a proxy's HTML error page: the status still tells what happened
      }
      return { status: response.status, headers: response.headers, body: json };
    } catch (error) {
      throw new NetworkError(error instanceof Error ? error.message : String(error));
    } finally {
      clearTimeout(timer);
      this.#abort.signal.removeEventListener("abort", onStop);
    }
  }

  async #token(forceRefresh = false) {
    const token = await this.#options.getIdToken(forceRefresh);
    return token || null;
  }

  /**
   * @param {string} token
   * @returns {Promise<Record<string, string>>}
   */
  async #authHeaders(token) {
    /** @type {Record<string, string>} */
    const headers = { Authorization: `Bearer ${token}` };
    if (this.#options.getAppCheckToken) {
      const appCheck = await this.#options.getAppCheckToken();
      if (appCheck) headers["X-Firebase-AppCheck"] = appCheck;
    }
    return headers;
  }

  /**
   * @param {number} attempt
   * @param {number} [floorMs]
   */
  #backoff(attempt, floorMs = 0) {
    // Full jitter over an exponential window, never sooner than the server asked.
    const window = Math.min(
      this.#options.backoffMaxMs,
      this.#options.backoffBaseMs * 2 ** Math.max(0, attempt - 1),
    );
    return Math.round(floorMs + this.#random() * window);
  }

  /** @param {number} ms */
  #sleep(ms) {
    return this.#clock.sleep(ms, this.#abort.signal);
  }

  // --- the campaign --------------------------------------------------------------------------

  async #refreshCampaign() {
    let response;
    try {
      response = await this.#request("GET", this.#url(), { Accept: "application/json" });
    } catch (error) {
      if (!(error instanceof NetworkError)) throw error;
      this.#campaignFailures += 1;
      if (!this.#state.campaign) {
        this.#fail(new CodedropError("NETWORK_ERROR", MESSAGES.NETWORK_ERROR, { retryable: true }));
      }
      return false;
    }
    if (response.status === 200 && response.body) {
      this.#campaignFailures = 0;
      this.#applyCampaign(response.body);
      return true;
    }
    this.#campaignFailures += 1;
    if (response.status === 404) {
      this.#fail(apiError(response, { retryable: false }));
    } else if (!this.#state.campaign) {
      this.#fail(apiError(response, { retryable: true }));
    }
    return false;
  }

  async #start() {
    await this.#refreshCampaign();
    if (!this.#stopped && this.#state.campaign) await this.#recover();
    this.#ensureWatch();
    return this.#state;
  }

  // After a reload: the code the shopper holds, or the claim they had started.
  async #recover() {
    let token;
    try {
      token = await this.#token();
    } catch (error) {
      console.warn("codedrop: getIdToken failed; not looking for a held code", error);
      return;
    }
    if (!token) return; // not signed in yet: nothing can be held
    this.#lastToken = token;
    const pending = this.#pending(token);
    if (await this.#lookupHeld(token)) return;
    if (pending) {
      this.#wantsClaim = true;
      if (this.#state.status === "ready") void this.claim();
    }
  }

  /** @param {string} token */
  async #lookupHeld(token) {
    let response;
    try {
      response = await this.#request(
        "GET",
        this.#url("/claims/me"),
        await this.#authHeaders(token),
      );
    } catch (error) {
      if (error instanceof NetworkError) return false;
      throw error;
    }
    const claims = response.status === 200 ? (response.body?.claims ?? []) : [];
    if (claims.length === 0) return false;
    this.#claimed(claims[claims.length - 1], claims, token);
    return true;
  }

  /**
   * @param {Claim} claim
   * @param {Claim[]} claims
   * @param {string | null} token
   */
  #claimed(claim, claims, token) {
    this.#clearPending(token);
    this.#wantsClaim = false;
    this.#set({
      status: "claimed",
      claim: Object.freeze({ ...claim }),
      claims: Object.freeze(claims.map((c) => Object.freeze({ ...c }))),
      code: claim.code,
      waiting: null,
      error: null,
    });
  }

  #ensureWatch() {
    if (this.#watching || this.#stopped) return;
    this.#watching = true;
    this.#watch()
      .catch((error) => console.error("codedrop: refreshing the campaign failed", error))
      .finally(() => {
        this.#watching = false;
      });
  }

  // Countdown ticks, stock refreshes, the opening of the sale and its end, until stop().
  async #watch() {
    while (!this.#stopped) {
      const { status, campaign } = this.#state;
      if (status === "claimed") return;
      if (!campaign) {
        if (this.#state.error?.code === "CAMPAIGN_NOT_FOUND") return;
        await this.#sleep(this.#backoff(this.#campaignFailures, 1000));
        if (!this.#stopped) await this.#refreshCampaign();
        continue;
      }
      const now = this.#clock.now();
      if (status === "not_started") {
        const left = Date.parse(campaign.starts_at) - now;
        if (left > 0) {
          // Wake on whole seconds so the countdown ticks evenly.
          await this.#sleep(Math.min(left, left % 1000 || 1000));
          if (!this.#stopped) this.#set({});
          continue;
        }
        // The sale should be open by our clock; the server's clock decides.
        if (!(await this.#refreshCampaign()) || this.#state.status === "not_started") {
          await this.#sleep(this.#backoff(1, 1000));
        }
        continue;
      }
      if (this.#claimPromise) {
        await this.#claimPromise; // the claim drives the state meanwhile
        continue;
      }
      const interval = this.#options.refreshIntervalMs;
      if (status === "ended" || !(interval > 0)) return; // a claim finds out the rest
      // Refresh the stock every interval, and ask again when the sale should end by our clock.
      const untilEnd = Date.parse(campaign.ends_at) - now;
      await this.#sleep(untilEnd > 0 ? Math.min(interval, untilEnd) : interval);
      if (!this.#stopped && !this.#claimPromise) await this.#refreshCampaign();
    }
  }

  // --- the claim -----------------------------------------------------------------------------

  /** @param {string} token */
  #storageKey(token) {
    const user = tokenUserId(token) ?? "anonymous";
    return `${VERSION_PREFIX}:${this.#options.campaignId}:${user}`;
  }

  // The claim in progress for this shopper: its Idempotency-Key and waiting-room ticket.
  /**
   * @param {string | null} [token]
   * @returns {Pending | null}
   */
  #pending(token = this.#lastToken) {
    if (!token) return null;
    try {
      const raw = this.#storage.getItem(this.#storageKey(token));
      const pending = raw ? JSON.parse(raw) : null;
      if (!pending?.key) return null;
      if (this.#clock.now() - (pending.startedAt ?? 0) > this.#options.pendingMaxAgeMs) {
        return { key: pending.key, ticket: null, startedAt: pending.startedAt };
      }
      return pending;
    } catch {
      return null;
    }
  }

  /**
   * @param {string} token
   * @param {Pending} pending
   */
  #savePending(token, pending) {
    try {
      this.#storage.setItem(this.#storageKey(token), JSON.stringify(pending));
    } catch {
      // Quota or privacy mode: the key still holds for the retries of this page.
    }
  }

  /** @param {string | null} token */
  #clearPending(token) {
    try {
      if (token) this.#storage.removeItem(this.#storageKey(token));
    } catch {
      // as above
    }
  }

  /** @type {string | null} */
  #lastToken = null;

  async #runClaim() {
    try {
      await this.start(); // at once when the page started us already
      if (this.#state.status === "claimed") return this.#state; // the reload lookup found it
      if (this.#state.status !== "claiming") this.#set({ status: "claiming" });
      return await this.#claimLoop();
    } catch (error) {
      this.#fail(error);
      return this.#state;
    }
  }

  /**
   * @param {boolean} forceRefresh
   * @returns {Promise<string>}
   */
  async #signedInToken(forceRefresh) {
    let token = await this.#token(forceRefresh);
    if (!token && this.#options.signIn) {
      await this.#options.signIn();
      token = await this.#token(false);
    }
    if (!token) {
      throw new CodedropError("SIGN_IN_REQUIRED", MESSAGES.SIGN_IN_REQUIRED, { retryable: true });
    }
    this.#lastToken = token;
    return token;
  }

  async #claimLoop() {
    let token = await this.#signedInToken(false);
    /** @type {Pending} */
    const pending = this.#pending(token) ?? {
      key: newIdempotencyKey(),
      ticket: null,
      startedAt: this.#clock.now(),
    };
    this.#savePending(token, pending);
    /** @type {Retry} */
    const retry = { failures: 0, refreshedToken: false, droppedTicket: false };

    while (!this.#stopped) {
      /** @type {Record<string, string>} */
      const headers = {
        ...(await this.#authHeaders(token)),
        "Content-Type": "application/json",
        "Idempotency-Key": pending.key,
      };
      if (pending.ticket) headers["X-Waiting-Room-Ticket"] = pending.ticket;
      let response;
      try {
        response = await this.#request("POST", this.#url("/claims"), headers, "{}");
      } catch (error) {
        if (!(error instanceof NetworkError)) throw error;
        await this.#retryOrFail(retry, 0, "NETWORK_ERROR", MESSAGES.NETWORK_ERROR);
        continue;
      }
      const outcome = await this.#handle(response, { token, pending, retry });
      if (outcome === "done") return this.#state;
      if (outcome === "refresh-token") token = await this.#signedInToken(true);
    }
    return this.#state;
  }

  // One response of the claim endpoint: "done", "retry" (after any wait), or "refresh-token".
  /**
   * @param {ApiResponse} response
   * @param {{ token: string, pending: Pending, retry: Retry }} claim
   * @returns {Promise<"done" | "retry" | "refresh-token">}
   */
  async #handle(response, { token, pending, retry }) {
    const { status, body } = response;
    const code = body?.error_code;
    const retryAfterMs = parseRetryAfter(response.headers?.get?.("Retry-After"), this.#clock.now());

    if (status === 200 || status === 201) {
      this.#claimed(body, [body], token);
      return "done";
    }
    if (status === 429 && code === "WAITING_ROOM") {
      if (body.ticket) pending.ticket = body.ticket;
      this.#setEntry(body); // a fair drop's entrant: their entry and drawn place
      this.#savePending(token, pending);
      retry.failures = 0; // a place in line is progress, not failure
      // The server jitters retry_after_ms within one admission tick; a shopper it admits is
      // seen in time only if we come back when it says.
      const wait = Number.isFinite(body.retry_after_ms)
        ? body.retry_after_ms
        : Math.round((retryAfterMs ?? 1000) * (1 + 0.2 * this.#random()));
      this.#set({
        status: "waiting",
        waiting: Object.freeze({
          estimatedWaitSeconds: body.estimated_wait_seconds ?? null,
          retryInMs: Math.max(0, wait),
          since: this.#state.waiting?.since ?? this.#clock.now(),
        }),
      });
      await this.#sleep(Math.max(0, wait));
      return "retry";
    }
    if (status === 410) {
      this.#clearPending(token);
      this.#wantsClaim = false;
      this.#set({ status: "sold_out", waiting: null, remaining: 0 });
      return "done";
    }
    if (status === 409) return this.#notActive(response, token, retry);
    if (status === 401 && !retry.refreshedToken && code !== "APP_CHECK_REQUIRED") {
      retry.refreshedToken = true; // an ID token expires after an hour: get a fresh one once
      return "refresh-token";
    }
    const badTicket =
      (status === 400 && code === "INVALID_TICKET") ||
      (status === 403 && code === "TICKET_NOT_YOURS");
    if (badTicket && !retry.droppedTicket) {
      // Expired, damaged, or another account's (a shared browser): ask for a place once.
      retry.droppedTicket = true;
      pending.ticket = null;
      this.#savePending(token, pending);
      return "retry";
    }
    if (status === 503 || status === 429 || status >= 500) {
      await this.#retryOrFail(
        retry,
        retryAfterMs ?? 0,
        code ?? "UNEXPECTED_RESPONSE",
        null,
        response,
      );
      return "retry";
    }
    // 400, 401, 403, 404 and anything unknown: the shopper (or the page) must act.
    if (status !== 401) this.#clearPending(token);
    this.#wantsClaim = false;
    throw apiError(response, { retryable: status === 401 });
  }

  /**
   * @param {ApiResponse} response
   * @param {string} token
   * @param {Retry} retry
   * @returns {Promise<"done" | "retry">}
   */
  async #notActive(response, token, retry) {
    // The campaign is scheduled, paused or over: the campaign document says which.
    await this.#refreshCampaign();
    const status = this.#state.campaign ? this.#statusOf(this.#state.campaign) : "error";
    if (status === "ended") {
      this.#clearPending(token);
      this.#wantsClaim = false;
      this.#set({ status: "ended", waiting: null });
      return "done";
    }
    if (status === "not_started" || status === "paused") {
      // Keep the key and ticket: the claim resumes when the sale opens (or resumes).
      this.#set({ status, waiting: null });
      return "done";
    }
    if (status === "sold_out") {
      this.#set({ status: "sold_out", waiting: null });
      return "done";
    }
    // It looks active to us: our copy is a moment older than the server's. Try again shortly.
    await this.#retryOrFail(retry, 0, "CAMPAIGN_NOT_ACTIVE", null, response);
    return "retry";
  }

  /**
   * @param {Retry} retry
   * @param {number} floorMs
   * @param {string} code
   * @param {string | null} message
   * @param {ApiResponse | null} [response]
   */
  async #retryOrFail(retry, floorMs, code, message, response = null) {
    retry.failures += 1;
    if (retry.failures > this.#options.maxRetries) {
      throw response
        ? apiError(response, { retryable: true })
        : new CodedropError(code, message ?? MESSAGES[code] ?? MESSAGES.UNEXPECTED_RESPONSE, {
            retryable: true,
          });
    }
    await this.#sleep(this.#backoff(retry.failures, floorMs));
  }
}

/**
 * @param {ApiResponse} response
 * @param {{ retryable: boolean }} options
 */
function apiError(response, { retryable }) {
  const body = response.body ?? {};
  return new CodedropError(
    body.error_code ?? (response.status === 404 ? "CAMPAIGN_NOT_FOUND" : "UNEXPECTED_RESPONSE"),
    body.error_message ?? MESSAGES.UNEXPECTED_RESPONSE,
    { status: response.status, retryable },
  );
}
