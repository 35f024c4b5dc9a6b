// codedrop.js against a fake claim_api and a virtual clock: every status of the API, retries
// with backoff and a stable Idempotency-Key, Retry-After, the waiting-room ticket, reloads.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  createCodedrop,
  memoryStorage,
  parseRetryAfter,
  STATUSES,
  tokenUserId,
} from "../codedrop.js";
import {
  API,
  CAMPAIGN,
  FakeApi,
  FakeClock,
  NETWORK_DOWN,
  apiError,
  campaign,
  claimBody,
  fixedRandom,
  idToken,
  json,
  until,
} from "./fakes.js";

const ALICE = idToken("alice");

/** A client with fakes; `refreshIntervalMs: 0` keeps stock refreshes out of the request log. */
function client(api, overrides = {}) {
  const clock = overrides.clock ?? new FakeClock();
  const drop = createCodedrop({
    apiBase: `${API}/`,
    campaignId: CAMPAIGN,
    getIdToken: async () => ALICE,
    fetch: api.fetch,
    clock,
    random: fixedRandom(0.5),
    storage: memoryStorage(),
    refreshIntervalMs: 0,
    ...overrides,
  });
  const seen = [];
  drop.subscribe((state) => seen.push(state));
  return { drop, clock, seen, statuses: () => seen.map((s) => s.status) };
}

const CLAIMS = "POST /claims";
const ME = "GET /claims/me";
const NOT_HELD = apiError(404, "CLAIM_NOT_FOUND");

/** A campaign read as open, then `status` (after the claim's 409), then open again. */
function reopening(status) {
  return new FakeApi({
    GET: [json(200, campaign()), json(200, campaign({ status })), json(200, campaign())],
    [ME]: NOT_HELD,
    [CLAIMS]: [apiError(409, "CAMPAIGN_NOT_ACTIVE"), json(201, claimBody())],
  });
}

/** The API of a campaign on sale to a shopper holding no code, its claims answered `claims`. */
function claimApi(claims) {
  return new FakeApi({ GET: json(200, campaign()), [ME]: NOT_HELD, [CLAIMS]: claims });
}

function keysOf(api) {
  return api.sent(CLAIMS).map((r) => r.headers["Idempotency-Key"]);
}

/** `sends` claims were sent, every one with the same Idempotency-Key. */
function assertOneKey(api, sends) {
  const keys = keysOf(api);
  assert.equal(keys.length, sends);
  assert.equal(new Set(keys).size, 1);
}

describe("loading the campaign", () => {
  it("shows an open sale with its stock, and looks for a code the shopper holds", async () => {
    const api = new FakeApi({ GET: json(200, campaign()), [ME]: NOT_HELD });
    const { drop } = client(api);
    const state = await drop.start();
    drop.stop();
    assert.equal(state.status, "ready");
    assert.equal(state.remaining, 42);
    assert.equal(state.campaign.title, "Spring sale");
    assert.equal(api.sent(ME)[0].headers.Authorization, `Bearer ${ALICE}`);
    assert.equal(api.sent("GET")[0].url, `${API}/v1/campaigns/${CAMPAIGN}`);
  });

  it("asks nothing on the shopper's behalf before anyone signs in", async () => {
    const api = new FakeApi({ GET: json(200, campaign()) });
    const { drop } = client(api, { getIdToken: async () => null });
    await drop.start();
    drop.stop();
    assert.deepEqual(
      api.requests.map((r) => r.route),
      ["GET"],
    );
  });

  for (const [server, expected] of [
    ["paused", "paused"],
    ["ended", "ended"],
    ["sold_out", "sold_out"],
  ]) {
    it(`shows a ${server} campaign as ${expected}`, async () => {
      const api = new FakeApi({ GET: json(200, campaign({ status: server })), [ME]: NOT_HELD });
      const { drop } = client(api);
      assert.equal((await drop.start()).status, expected);
      drop.stop();
    });
  }

  it("404 CAMPAIGN_NOT_FOUND is an error that retrying cannot fix", async () => {
    const api = new FakeApi({ GET: apiError(404, "CAMPAIGN_NOT_FOUND") });
    const { drop } = client(api);
    const state = await drop.start();
    await until(() => api.requests.length >= 1);
    drop.stop();
    assert.equal(state.status, "error");
    assert.deepEqual(
      { ...state.error },
      {
        code: "CAMPAIGN_NOT_FOUND",
        message: "CAMPAIGN_NOT_FOUND (test)",
        status: 404,
        retryable: false,
      },
    );
    assert.equal(api.sent("GET").length, 1);
  });

  it("a network failure while loading is retried with backoff until the campaign loads", async () => {
    const api = new FakeApi({
      GET: [NETWORK_DOWN, NETWORK_DOWN, json(200, campaign())],
      [ME]: NOT_HELD,
    });
    const { drop, clock } = client(api);
    const first = await drop.start();
    assert.equal(first.status, "error");
    assert.equal(first.error.code, "NETWORK_ERROR");
    await until(() => drop.state.status === "ready", "the campaign to load");
    drop.stop();
    // 1 s floor plus jitter (0.5 of a window that doubles).
    assert.deepEqual(clock.sleeps.slice(0, 2), [1250, 1500]);
  });
});

describe("claiming", () => {
  it("201: the code, with one Idempotency-Key and the bearer token", async () => {
    const api = claimApi(json(201, claimBody("SPRING-0001")));
    const { drop, statuses } = client(api);
    await drop.start();
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(state.code, "SPRING-0001");
    assert.equal(state.claim.claim_id, "claim-1");
    const [request] = api.sent(CLAIMS);
    assert.equal(request.headers.Authorization, `Bearer ${ALICE}`);
    assert.equal(request.headers["Content-Type"], "application/json");
    assert.match(request.headers["Idempotency-Key"], /^[\x21-\x7e]{1,255}$/);
    assert.equal(request.init.body, "{}");
    assert.equal(request.init.credentials, "omit");
    assert.deepEqual(statuses(), ["loading", "ready", "claiming", "claimed"]);
  });

  it("200: a shopper who already holds the allowed codes sees theirs", async () => {
    const api = claimApi(json(200, claimBody("SPRING-0007")));
    const { drop } = client(api);
    const state = await drop.claim(); // without start(): claim() loads the campaign first
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(state.code, "SPRING-0007");
  });

  it("a double click sends one claim", async () => {
    const api = claimApi(json(201, claimBody()));
    const { drop } = client(api);
    await drop.start();
    const first = drop.claim();
    const second = drop.claim();
    assert.equal(first, second);
    await first;
    const third = await drop.claim(); // claimed already: nothing is sent
    drop.stop();
    assert.equal(third.status, "claimed");
    assert.equal(api.sent(CLAIMS).length, 1);
  });

  it("sends the App Check token when the page provides one", async () => {
    const api = claimApi(json(201, claimBody()));
    const { drop } = client(api, { getAppCheckToken: async () => "app-check-token" });
    await drop.claim();
    drop.stop();
    assert.equal(api.sent(CLAIMS)[0].headers["X-Firebase-AppCheck"], "app-check-token");
    assert.equal(api.sent(ME)[0].headers["X-Firebase-AppCheck"], "app-check-token");
  });

  it("sends no App Check header when the page has no token", async () => {
    const api = claimApi(json(201, claimBody()));
    const { drop } = client(api, { getAppCheckToken: async () => null });
    await drop.claim();
    drop.stop();
    assert.equal("X-Firebase-AppCheck" in api.sent(CLAIMS)[0].headers, false);
  });

  it("a shopper not signed in is signed in by signIn(), once", async () => {
    let token = null;
    let signIns = 0;
    const api = new FakeApi({
      GET: json(200, campaign()),
      [CLAIMS]: json(201, claimBody()),
    });
    const { drop } = client(api, {
      getIdToken: async () => token,
      signIn: async () => {
        signIns += 1;
        token = ALICE;
      },
    });
    await drop.start();
    drop.claim();
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(signIns, 1);
  });

  it("without signIn(), a signed-out claim asks the shopper to sign in", async () => {
    const api = new FakeApi({ GET: json(200, campaign()) });
    const { drop } = client(api, { getIdToken: async () => null });
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "error");
    assert.equal(state.error.code, "SIGN_IN_REQUIRED");
    assert.equal(state.error.retryable, true);
    assert.equal(api.sent(CLAIMS).length, 0);
  });
});

describe("retries", () => {
  it("503 CONTENDED: honours Retry-After with growing jittered backoff, same Idempotency-Key", async () => {
    const contended = apiError(503, "CONTENDED", {}, { "Retry-After": "1" });
    const api = claimApi([contended, contended, contended, json(201, claimBody())]);
    const { drop, clock } = client(api);
    await drop.start();
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assertOneKey(api, 4);
    // Retry-After (1 s) is the floor; jitter is half (random = 0.5) of 500, 1000, 2000 ms.
    assert.deepEqual(clock.sleeps, [1250, 1500, 2000]);
  });

  it("network errors and 5xx are retried with exponential backoff and full jitter", async () => {
    const api = claimApi([
      NETWORK_DOWN,
      json(500, { error_code: "INTERNAL", error_message: "boom" }),
      json(502, "<html>Bad gateway</html>"),
      json(504, null),
      json(201, claimBody()),
    ]);
    const { drop, clock } = client(api, { random: fixedRandom(0.999) });
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(new Set(keysOf(api)).size, 1);
    assert.deepEqual(clock.sleeps, [500, 999, 1998, 3996]);
  });

  it("the backoff window is capped", async () => {
    const api = claimApi([...Array(6).fill(NETWORK_DOWN), json(201, claimBody())]);
    const { drop, clock } = client(api, {
      random: fixedRandom(0.5),
      maxRetries: 10,
      backoffMaxMs: 3000,
    });
    await drop.claim();
    drop.stop();
    assert.deepEqual(clock.sleeps, [250, 500, 1000, 1500, 1500, 1500]);
  });

  it("gives up after maxRetries with a retryable error; claiming again keeps the key", async () => {
    const api = claimApi([
      ...Array(3).fill(apiError(503, "CONTENDED", {}, { "Retry-After": "1" })),
      json(201, claimBody()),
    ]);
    const { drop } = client(api, { maxRetries: 2 });
    const failed = await drop.claim();
    assert.equal(failed.status, "error");
    assert.deepEqual(
      { ...failed.error },
      { code: "CONTENDED", message: "CONTENDED (test)", status: 503, retryable: true },
    );
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assertOneKey(api, 4);
  });

  it("a network failure that outlasts the retries says so", async () => {
    const api = claimApi(NETWORK_DOWN);
    const { drop } = client(api, { maxRetries: 1 });
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.error.code, "NETWORK_ERROR");
    assert.equal(state.error.status, null);
    assert.equal(state.error.retryable, true);
  });

  it("each new claim after a code was received gets a new key", async () => {
    const api = claimApi(json(201, claimBody()));
    const storage = memoryStorage();
    const one = client(api, { storage });
    await one.drop.claim();
    one.drop.stop();
    const two = client(api, { storage, getIdToken: async () => idToken("bob") });
    await two.drop.claim();
    two.drop.stop();
    assert.equal(new Set(keysOf(api)).size, 2);
  });
});

describe("the waiting room", () => {
  it("429 WAITING_ROOM: waits as told, shows the estimate, resends the ticket and the key", async () => {
    const api = claimApi([
      apiError(
        429,
        "WAITING_ROOM",
        { ticket: "T1", retry_after_ms: 700, estimated_wait_seconds: 12.5 },
        { "Retry-After": "1" },
      ),
      apiError(
        429,
        "WAITING_ROOM",
        { ticket: "T1", retry_after_ms: 900, estimated_wait_seconds: 3 },
        { "Retry-After": "1" },
      ),
      json(201, claimBody()),
    ]);
    const { drop, clock, seen } = client(api);
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    const sent = api.sent(CLAIMS);
    assert.equal(sent[0].headers["X-Waiting-Room-Ticket"], undefined);
    assert.equal(sent[1].headers["X-Waiting-Room-Ticket"], "T1");
    assert.equal(sent[2].headers["X-Waiting-Room-Ticket"], "T1");
    assert.equal(new Set(keysOf(api)).size, 1);
    assert.deepEqual(clock.sleeps, [700, 900]);
    const waits = seen.filter((s) => s.status === "waiting").map((s) => s.waiting);
    assert.deepEqual(
      waits.map((w) => [w.estimatedWaitSeconds, w.retryInMs]),
      [
        [12.5, 700],
        [3, 900],
      ],
    );
    assert.equal(waits[1].since, waits[0].since);
    assert.equal(state.waiting, null);
  });

  it("without retry_after_ms it honours Retry-After, with a little jitter", async () => {
    const api = claimApi([
      apiError(429, "WAITING_ROOM", { ticket: "T1" }, { "Retry-After": "2" }),
      json(201, claimBody()),
    ]);
    const { drop, clock } = client(api);
    await drop.claim();
    drop.stop();
    assert.deepEqual(clock.sleeps, [2200]);
  });

  it("the waiting room never runs out of retries", async () => {
    const wait = apiError(429, "WAITING_ROOM", {
      ticket: "T1",
      retry_after_ms: 500,
      estimated_wait_seconds: 60,
    });
    const api = claimApi([...Array(20).fill(wait), json(201, claimBody())]);
    const { drop } = client(api, { maxRetries: 2 });
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(api.sent(CLAIMS).length, 21);
  });

  it("400 INVALID_TICKET: drops the ticket and asks for a new place once", async () => {
    const api = claimApi([
      apiError(429, "WAITING_ROOM", { ticket: "EXPIRED", retry_after_ms: 500 }),
      apiError(400, "INVALID_TICKET"),
      apiError(429, "WAITING_ROOM", { ticket: "T2", retry_after_ms: 500 }),
      apiError(400, "INVALID_TICKET"),
    ]);
    const { drop } = client(api);
    const state = await drop.claim();
    drop.stop();
    assert.deepEqual(
      api.sent(CLAIMS).map((r) => r.headers["X-Waiting-Room-Ticket"]),
      [undefined, "EXPIRED", undefined, "T2"],
    );
    assert.equal(state.status, "error");
    assert.equal(state.error.code, "INVALID_TICKET");
    assert.equal(state.error.retryable, false);
  });
});

describe("answers that end the claim", () => {
  it("410 SOLD_OUT", async () => {
    const api = claimApi(apiError(410, "SOLD_OUT"));
    const { drop } = client(api);
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "sold_out");
    assert.equal(state.remaining, 0);
  });

  it("409 CAMPAIGN_NOT_ACTIVE on a campaign that ended shows ended", async () => {
    const api = new FakeApi({
      GET: [json(200, campaign()), json(200, campaign({ status: "ended" }))],
      [ME]: NOT_HELD,
      [CLAIMS]: apiError(409, "CAMPAIGN_NOT_ACTIVE"),
    });
    const { drop } = client(api);
    await drop.start();
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "ended");
    assert.equal(api.sent(CLAIMS).length, 1);
  });

  it("409 on a paused sale waits for it to resume, then claims with the same key", async () => {
    const api = reopening("paused");
    const { drop } = client(api, { refreshIntervalMs: 5000 });
    await drop.start();
    const paused = await drop.claim();
    assert.equal(paused.status, "paused");
    await until(() => drop.state.status === "claimed", "the resumed claim");
    drop.stop();
    assert.equal(new Set(keysOf(api)).size, 1);
    assert.equal(api.sent(CLAIMS).length, 2);
  });

  it("409 before the sale opens (our clock is ahead): counts down, then claims with the same key", async () => {
    const clock = new FakeClock(Date.parse("2030-03-01T09:59:58Z"));
    const api = reopening("scheduled");
    const { drop, statuses } = client(api, { clock });
    await drop.start();
    assert.equal((await drop.claim()).status, "not_started");
    await until(() => drop.state.status === "claimed", "the claim at the opening");
    drop.stop();
    assert.equal(new Set(keysOf(api)).size, 1);
    assert.deepEqual(
      statuses().filter((s, i, all) => s !== all[i - 1]),
      ["loading", "ready", "claiming", "not_started", "ready", "claiming", "claimed"],
    );
  });

  it("409 while our copy still says active: retried, bounded", async () => {
    const api = claimApi(apiError(409, "CAMPAIGN_NOT_ACTIVE"));
    const { drop } = client(api, { maxRetries: 2 });
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "error");
    assert.equal(state.error.code, "CAMPAIGN_NOT_ACTIVE");
    assert.equal(api.sent(CLAIMS).length, 3);
  });

  it("401 gets a fresh ID token once, then succeeds", async () => {
    const forced = [];
    const api = claimApi([apiError(401, "UNAUTHENTICATED"), json(201, claimBody())]);
    const { drop } = client(api, {
      getIdToken: async (force) => {
        forced.push(Boolean(force));
        return force ? idToken("alice", { fresh: true }) : ALICE;
      },
    });
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.ok(forced.includes(true));
    const [first, second] = api.sent(CLAIMS);
    assert.notEqual(first.headers.Authorization, second.headers.Authorization);
    assert.equal(first.headers["Idempotency-Key"], second.headers["Idempotency-Key"]);
  });

  it("401 twice is an error the shopper can retry (signing in again)", async () => {
    const api = claimApi(apiError(401, "UNAUTHENTICATED"));
    const { drop } = client(api);
    const state = await drop.claim();
    drop.stop();
    assert.deepEqual(
      { ...state.error },
      { code: "UNAUTHENTICATED", message: "UNAUTHENTICATED (test)", status: 401, retryable: true },
    );
    assert.equal(api.sent(CLAIMS).length, 2);
  });

  for (const [status, code] of [
    [400, "REQUEST_VALIDATION_FAILED"],
    [403, "IDENTITY_REQUIRED"],
    [403, "SIGN_IN_PROVIDER_NOT_ALLOWED"],
    [404, "CAMPAIGN_NOT_FOUND"],
  ]) {
    it(`${status} ${code} is an error, not retried, and the next claim starts afresh`, async () => {
      const api = claimApi(apiError(status, code));
      const { drop } = client(api);
      const state = await drop.claim();
      assert.deepEqual(
        { ...state.error },
        { code, message: `${code} (test)`, status, retryable: false },
      );
      await drop.claim();
      drop.stop();
      const keys = keysOf(api);
      assert.equal(keys.length, 2);
      assert.notEqual(keys[0], keys[1]);
    });
  }

  it("an unknown status is an error with a generic message", async () => {
    const api = claimApi(json(418, "teapot"));
    const { drop } = client(api);
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.error.code, "UNEXPECTED_RESPONSE");
    assert.equal(state.error.status, 418);
    assert.equal(api.sent(CLAIMS).length, 1);
  });

  it("a claim error stays on screen while the stock refreshes", async () => {
    const api = claimApi(apiError(403, "IDENTITY_REQUIRED"));
    const { drop } = client(api, { refreshIntervalMs: 1000 });
    await drop.claim();
    await until(() => api.sent("GET").length >= 3, "two stock refreshes");
    drop.stop();
    assert.equal(drop.state.status, "error");
  });
});

describe("reloads", () => {
  it("a shopper who holds a code sees it again (claims/me), and nothing is claimed", async () => {
    const api = new FakeApi({
      GET: json(200, campaign({ status: "sold_out", remaining: 0 })),
      [ME]: json(200, {
        claims: [{ claim_id: "c1", code: "SPRING-0042", claimed_at: "2030-03-01T10:00:05Z" }],
      }),
    });
    const { drop } = client(api);
    const state = await drop.start();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(state.code, "SPRING-0042");
    assert.equal(state.claims.length, 1);
    assert.equal(api.sent(CLAIMS).length, 0);
  });

  it("a claim cut short in the waiting room resumes with its key and ticket", async () => {
    const storage = memoryStorage();
    const api = claimApi(
      apiError(429, "WAITING_ROOM", {
        ticket: "PLACE-17",
        retry_after_ms: 800,
        estimated_wait_seconds: 40,
      }),
    );
    const before = client(api, { storage });
    await before.drop.start();
    before.drop.claim();
    await until(() => before.drop.state.status === "waiting", "the waiting room");
    before.drop.stop(); // the shopper reloads

    api.on(CLAIMS, json(201, claimBody("SPRING-0099")));
    const after = client(api, { storage });
    await after.drop.start();
    await until(() => after.drop.state.status === "claimed", "the resumed claim");
    after.drop.stop();
    const [first, ...rest] = api.sent(CLAIMS);
    const resumed = rest.at(-1);
    assert.equal(resumed.headers["Idempotency-Key"], first.headers["Idempotency-Key"]);
    assert.equal(resumed.headers["X-Waiting-Room-Ticket"], "PLACE-17");
    assert.equal(after.drop.state.code, "SPRING-0099");
  });

  it("a claim whose answer was lost finds its code with claims/me, and leaves nothing pending", async () => {
    const storage = memoryStorage();
    const api = claimApi(NETWORK_DOWN);
    const before = client(api, { storage, maxRetries: 0 });
    assert.equal((await before.drop.claim()).error.code, "NETWORK_ERROR");
    before.drop.stop();
    assert.equal(storage.getItem(`codedrop:v1:${CAMPAIGN}:alice`) !== null, true);

    api.on(
      ME,
      json(200, {
        claims: [{ claim_id: "c1", code: "SPRING-0100", claimed_at: "2030-03-01T10:00:05Z" }],
      }),
    );
    const after = client(api, { storage });
    const state = await after.drop.start();
    after.drop.stop();
    assert.equal(state.code, "SPRING-0100");
    assert.equal(api.sent(CLAIMS).length, 1);
    assert.equal(storage.getItem(`codedrop:v1:${CAMPAIGN}:alice`), null);
  });

  it("a ticket older than the server keeps them is dropped, the key kept", async () => {
    const storage = memoryStorage();
    const clock = new FakeClock();
    storage.setItem(
      `codedrop:v1:${CAMPAIGN}:alice`,
      JSON.stringify({ key: "old-key", ticket: "OLD", startedAt: clock.now() - 2 * 3600 * 1000 }),
    );
    const api = claimApi(json(201, claimBody()));
    const { drop } = client(api, { storage, clock });
    await drop.start();
    await until(() => drop.state.status === "claimed", "the resumed claim");
    drop.stop();
    const [request] = api.sent(CLAIMS);
    assert.equal(request.headers["Idempotency-Key"], "old-key");
    assert.equal(request.headers["X-Waiting-Room-Ticket"], undefined);
  });

  it("keys are kept per campaign and shopper", async () => {
    const storage = memoryStorage();
    const api = claimApi(NETWORK_DOWN);
    for (const user of ["alice", "bob"]) {
      const { drop } = client(api, {
        storage,
        maxRetries: 0,
        getIdToken: async () => idToken(user),
      });
      await drop.claim();
      drop.stop();
    }
    const alice = JSON.parse(storage.getItem(`codedrop:v1:${CAMPAIGN}:alice`));
    const bob = JSON.parse(storage.getItem(`codedrop:v1:${CAMPAIGN}:bob`));
    assert.notEqual(alice.key, bob.key);
  });
});

describe("the countdown", () => {
  it("ticks every second until the start, then opens the sale", async () => {
    const clock = new FakeClock(Date.parse("2030-03-01T09:59:56.500Z"));
    const api = new FakeApi({
      GET: [json(200, campaign({ status: "scheduled" })), json(200, campaign())],
      [ME]: NOT_HELD,
    });
    const { drop, seen } = client(api, { clock });
    const first = await drop.start();
    assert.equal(first.status, "not_started");
    assert.equal(first.startsInMs, 3500);
    await until(() => drop.state.status === "ready", "the sale to open");
    drop.stop();
    const countdown = seen.filter((s) => s.status === "not_started").map((s) => s.startsInMs);
    assert.deepEqual([...new Set(countdown)], [3500, 3000, 2000, 1000, 0]);
    assert.deepEqual(clock.sleeps.slice(0, 4), [500, 1000, 1000, 1000]);
  });

  it("if the server's clock is behind, it asks again until the sale is open", async () => {
    const clock = new FakeClock(Date.parse("2030-03-01T09:59:59Z"));
    const scheduled = json(200, campaign({ status: "scheduled" }));
    const api = new FakeApi({
      GET: [scheduled, scheduled, scheduled, json(200, campaign())],
      [ME]: NOT_HELD,
    });
    const { drop } = client(api, { clock });
    await drop.start();
    await until(() => drop.state.status === "ready", "the sale to open");
    drop.stop();
    assert.equal(api.sent("GET").length, 4);
  });

  it("shows the end of the sale when it comes", async () => {
    const clock = new FakeClock(Date.parse("2030-03-01T11:59:58Z"));
    const api = new FakeApi({
      GET: [json(200, campaign()), json(200, campaign({ status: "ended" }))],
      [ME]: NOT_HELD,
    });
    const { drop } = client(api, { clock, refreshIntervalMs: 60_000 });
    await drop.start();
    await until(() => drop.state.status === "ended", "the end");
    drop.stop();
    assert.deepEqual(clock.sleeps, [2000]);
  });

  it("refreshes the stock while the shopper looks", async () => {
    const api = new FakeApi({
      GET: [
        json(200, campaign({ remaining: 5 })),
        json(200, campaign({ remaining: 3 })),
        json(200, campaign({ status: "sold_out", remaining: 0 })),
      ],
      [ME]: NOT_HELD,
    });
    const { drop, seen } = client(api, { refreshIntervalMs: 5000 });
    await drop.start();
    await until(() => drop.state.status === "sold_out", "sold out");
    drop.stop();
    assert.deepEqual(
      seen.map((s) => s.remaining).filter((r, i, all) => r !== all[i - 1]),
      [null, 5, 3, 0],
    );
  });
});

describe("helpers", () => {
  it("parseRetryAfter reads seconds and HTTP dates", () => {
    const now = Date.parse("2030-03-01T10:00:00Z");
    assert.equal(parseRetryAfter("3", now), 3000);
    assert.equal(parseRetryAfter("Fri, 01 Mar 2030 10:00:05 GMT", now), 5000);
    assert.equal(parseRetryAfter("Fri, 01 Mar 2030 09:00:00 GMT", now), 0);
    assert.equal(parseRetryAfter("soon", now), null);
    assert.equal(parseRetryAfter(null, now), null);
  });

  it("tokenUserId reads the user from a Firebase ID token", () => {
    assert.equal(tokenUserId(idToken("uid-é-1")), "uid-é-1");
    assert.equal(tokenUserId("not a token"), null);
  });

  it("exports every status", () => {
    assert.deepEqual([...STATUSES].sort(), [
      "claimed",
      "claiming",
      "ended",
      "error",
      "loading",
      "not_started",
      "paused",
      "ready",
      "sold_out",
      "waiting",
    ]);
  });

  it("refuses incomplete options", () => {
    assert.throws(() => createCodedrop({ campaignId: "x", getIdToken: () => null }), /apiBase/);
    assert.throws(() => createCodedrop({ apiBase: API, getIdToken: () => null }), /campaignId/);
    assert.throws(() => createCodedrop({ apiBase: API, campaignId: "x" }), /getIdToken/);
  });
});

describe("a fair drop", () => {
  const ENTRIES = "POST /entries";

  it("joins the pre-queue and keeps the entry; joining again answers the same one", async () => {
    const api = new FakeApi({
      GET: json(
        200,
        campaign({ status: "scheduled", pre_queue_opens_at: "2030-03-01T09:00:00.000Z" }),
      ),
      [ME]: NOT_HELD,
      [ENTRIES]: [json(201, { entry_id: "e1" }), json(200, { entry_id: "e1", place: null })],
    });
    const { drop } = client(api);
    await drop.start();
    const first = await drop.join();
    const again = await drop.join();
    drop.stop();
    assert.deepEqual(first, { entryId: "e1", place: null });
    assert.deepEqual(again, first);
    assert.deepEqual(drop.state.entry, first);
    assert.ok(api.sent(ENTRIES)[0].headers.Authorization.startsWith("Bearer "));
    assert.equal(drop.proofUrl, `${API}/v1/campaigns/${CAMPAIGN}/fairness`);
  });

  it("outside the pre-queue, join rejects with the API's error", async () => {
    const api = new FakeApi({
      GET: json(200, campaign()),
      [ME]: NOT_HELD,
      [ENTRIES]: apiError(409, "CAMPAIGN_NOT_ACTIVE", {
        error_message: "The pre-queue closed at the start.",
      }),
    });
    const { drop } = client(api);
    await drop.start();
    await assert.rejects(
      drop.join(),
      (error) => error.code === "CAMPAIGN_NOT_ACTIVE" && error.status === 409,
    );
    drop.stop();
    assert.equal(drop.state.entry, null);
  });

  it("shows the entry's drawn place while waiting, a null ticket keeps none", async () => {
    const api = claimApi([
      apiError(429, "WAITING_ROOM", {
        ticket: null,
        retry_after_ms: 1000,
        estimated_wait_seconds: null,
      }),
      apiError(429, "WAITING_ROOM", {
        ticket: "T1",
        retry_after_ms: 500,
        estimated_wait_seconds: 4,
        entry_id: "e1",
        place: 7,
      }),
      json(201, claimBody()),
    ]);
    const { drop, seen } = client(api);
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(api.sent(CLAIMS)[1].headers["X-Waiting-Room-Ticket"], undefined);
    assert.equal(api.sent(CLAIMS)[2].headers["X-Waiting-Room-Ticket"], "T1");
    const waiting = seen.filter((s) => s.status === "waiting" && s.entry);
    assert.deepEqual(waiting.at(-1).entry, { entryId: "e1", place: 7 });
    assert.equal(waiting.at(-1).waiting.estimatedWaitSeconds, 4);
  });

  it("another account's ticket (TICKET_NOT_YOURS) is dropped once, as an invalid one is", async () => {
    const api = claimApi([
      apiError(429, "WAITING_ROOM", { ticket: "BOBS", retry_after_ms: 100 }),
      apiError(403, "TICKET_NOT_YOURS"),
      json(201, claimBody()),
    ]);
    const { drop } = client(api);
    const state = await drop.claim();
    drop.stop();
    assert.equal(state.status, "claimed");
    assert.equal(api.sent(CLAIMS)[2].headers["X-Waiting-Room-Ticket"], undefined);
  });
});
