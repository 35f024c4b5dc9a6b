// Test doubles for codedrop.js: a scripted fake `fetch` standing in for claim_api, and a
// virtual clock whose sleeps advance time at once (and are recorded).

export const API = "https://api.example/claim_api";
export const CAMPAIGN = "spring-sale";
const BASE = `${API}/v1/campaigns/${CAMPAIGN}`;

/** An unsigned JWT in the Firebase format, enough for the client to read the user id. */
export function idToken(userId, extra = {}) {
  const encode = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${encode({ alg: "none", typ: "JWT" })}.${encode({ user_id: userId, sub: userId, ...extra })}.`;
}

export function campaign(overrides = {}) {
  return {
    campaign_id: CAMPAIGN,
    title: "Spring sale",
    starts_at: "2030-03-01T10:00:00Z",
    ends_at: "2030-03-01T12:00:00Z",
    status: "active",
    remaining: 42,
    waiting_room: { enabled: false, engaged: false, estimated_wait_seconds: 0 },
    ...overrides,
  };
}

export function claimBody(code = "SPRING-0001", overrides = {}) {
  return {
    claim_id: "claim-1",
    campaign_id: CAMPAIGN,
    user_id: "alice",
    code,
    claimed_at: "2030-03-01T10:00:05Z",
    ...overrides,
  };
}

export function json(status, body, headers = {}) {
  return { status, body, headers };
}

export function apiError(status, code, extra = {}, headers = {}) {
  return json(status, { error_code: code, error_message: `${code} (test)`, ...extra }, headers);
}

export const NETWORK_DOWN = Symbol("network down");

/**
 * A fake claim_api. Each route ("GET", "GET /claims/me", "POST /claims") answers from a script:
 * the next scripted answer each time, the last one repeated; a function is called with the
 * request. Every request is recorded with its headers.
 */
export class FakeApi {
  constructor(routes = {}) {
    this.routes = new Map();
    this.requests = [];
    for (const [route, answers] of Object.entries(routes)) this.on(route, answers);
    this.fetch = this.fetch.bind(this);
  }

  on(route, answers) {
    this.routes.set(route, Array.isArray(answers) ? [...answers] : [answers]);
    return this;
  }

  async fetch(url, init = {}) {
    const method = init.method ?? "GET";
    if (!url.startsWith(BASE)) throw new Error(`unexpected URL ${url}`);
    const suffix = url.slice(BASE.length);
    const route = suffix ? `${method} ${suffix}` : method;
    const request = { method, url, route, headers: { ...(init.headers ?? {}) }, init };
    this.requests.push(request);
    const script = this.routes.get(route);
    if (!script) throw new Error(`no answer scripted for ${route}`);
    let answer = script.length > 1 ? script.shift() : script[0];
    if (typeof answer === "function") answer = answer(request);
    if (answer === NETWORK_DOWN) throw new TypeError("Failed to fetch");
    const text =
      typeof answer.body === "string" ? answer.body : JSON.stringify(answer.body ?? null);
    return new Response(answer.status === 204 ? null : text, {
      status: answer.status,
      headers: { "Content-Type": "application/json", ...answer.headers },
    });
  }

  /** The requests sent to one route. */
  sent(route) {
    return this.requests.filter((r) => r.route === route);
  }
}

/** Virtual time: sleep(ms) records ms, moves `now` forward and resolves on the next turn of
 * the event loop (so loops yield, as they do with real timers). */
export class FakeClock {
  constructor(start = Date.parse("2030-03-01T10:00:00Z")) {
    this.time = start;
    this.sleeps = [];
  }

  now() {
    return this.time;
  }

  sleep(ms, signal) {
    this.sleeps.push(ms);
    return new Promise((resolve) => {
      setImmediate(() => {
        if (!signal?.aborted) this.time += ms;
        resolve();
      });
    });
  }
}

/** Randomness that is always the same number, so jittered waits can be asserted. */
export const fixedRandom = (value) => () => value;

/** Resolve once `predicate()` holds, turning the event loop meanwhile (fails after 2,000 turns). */
export async function until(predicate, what = "the condition") {
  for (let turn = 0; turn < 2000; turn += 1) {
    if (predicate()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`timed out waiting for ${what}`);
}
