// The example landing page: Firebase Auth signs the shopper in, codedrop.js does the rest, and
// this file only renders its state.
//
// config.json (served by the local stack; write your own for production):
//   {"apiBase": "<claim_api base URL>", "campaignId": "<default campaign>",
//    "firebase": {"apiKey": "...", "authDomain": "...", "projectId": "..."},
//    "authEmulatorUrl": "http://127.0.0.1:9099" (local only), "signInMethod": "anonymous",
//    "appCheckTokenUrl": "http://127.0.0.1:9098/token" (local only; in production
//    "appCheckSiteKey": "<reCAPTCHA Enterprise site key>")}
// ?campaign=<id> in the page's URL picks the campaign. A campaign whose identity is "phone", or
// that refuses anonymous sign-ins, gets phone sign-in (phone.js); the others anonymous sign-in.

import { createCodedrop } from "./codedrop.js";
import { createShopperAuth } from "./auth.js";
import { createKeeper } from "./keep.js";
import { createPhoneSignIn } from "./phone.js";

const $ = (selector) => document.querySelector(selector);
const main = $("#sale");
const statusLine = $('[data-testid="status"]');
const button = $("#claim");
const copyButton = $("#copy");
const numbers = new Intl.NumberFormat();

const MESSAGES = {
  loading: () => "Loading the sale…",
  not_started: () => "The sale has not started yet. Your button unlocks when it opens.",
  ready: () => "The sale is on. Get your code while they last.",
  paused: () => "The sale is paused for a moment.",
  claiming: () =>
    phone?.open ? "Sign in with your phone number to get your code." : "Getting your code…",
  waiting: () => "The sale is busy right now: you have a place in line.",
  claimed: () => "You got it! Here is your code.",
  sold_out: () => "Sold out.",
  ended: () => "This sale has ended.",
  error: (s) => s.error?.message ?? "Something went wrong.",
};

const BUTTON = {
  loading: ["Loading…", false],
  not_started: ["Opens soon", false],
  ready: ["Get my code", true],
  paused: ["Paused", false],
  claiming: ["Getting your code…", false],
  error: ["Try again", true],
};

function show(status) {
  for (const element of document.querySelectorAll("[data-show]")) {
    element.hidden = !element.dataset.show.split(" ").includes(status);
  }
}

const HOLDER = { uid: "shopper", phone: "phone number", email: "email address" };

function describeLimit(campaign) {
  const holder = HOLDER[campaign.identity] ?? "shopper";
  const count = campaign.max_per_user === 1 ? "One code" : `Up to ${campaign.max_per_user} codes`;
  return `${count} per ${holder}.`;
}

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

function renderCountdown(ms) {
  const total = Math.ceil((ms ?? 0) / 1000);
  const parts = {
    days: Math.floor(total / 86400),
    hours: Math.floor((total % 86400) / 3600),
    minutes: Math.floor((total % 3600) / 60),
    seconds: total % 60,
  };
  for (const [part, value] of Object.entries(parts)) {
    const text = part === "days" ? String(value) : String(value).padStart(2, "0");
    setText(document.querySelector(`[data-part="${part}"]`), text);
  }
  document.querySelector('[data-part="days"]').parentElement.hidden = parts.days === 0;
  const countdown = $('[data-testid="countdown"]');
  countdown.setAttribute(
    "aria-label",
    `${parts.days ? `${parts.days} days, ` : ""}${parts.hours} hours, ${parts.minutes} minutes, ${parts.seconds} seconds`,
  );
}

function describeWait(seconds) {
  if (seconds == null) return "Hang tight: you keep your place in line.";
  if (seconds < 5) return "Almost there…";
  if (seconds < 90) return `About ${Math.ceil(seconds / 5) * 5} seconds to go.`;
  return `About ${Math.round(seconds / 60)} minutes to go.`;
}

let lastStatus = null;
let lastState = null;
let client = null; // codedrop.js's client, once the page is configured
let entryAsk = null; // the timer of the next ask for a drawn place
let expiryTimer = null;

/** "Valid until …" under the code, or "Expired on …" once the page's clock passes it; re-rendered
 * when it expires. A code without a validity shows nothing. */
function renderValidity(claim) {
  const line = $('[data-testid="valid-until"]');
  clearTimeout(expiryTimer);
  line.hidden = !claim?.valid_until;
  if (line.hidden) return;
  const until = new Date(claim.valid_until);
  const left = until.getTime() - Date.now();
  const when = until.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  line.dataset.expired = String(left <= 0);
  setText(line, left > 0 ? `Valid until ${when}` : `Expired on ${when}`);
  // setTimeout takes at most 2^31-1 ms (about 24.8 days): a later expiry waits for a reload.
  if (left > 0 && left < 2 ** 31) expiryTimer = setTimeout(() => renderValidity(claim), left + 1);
}
let phone = null; // phone sign-in, once the page is configured
let keeper = null; // keeping the code on another device, once the page is configured

/** Whether a campaign counts phone numbers, or refuses the anonymous sign-in this page offers
 * otherwise. */
function needsPhone(campaign) {
  if (!campaign) return false;
  const providers = campaign.allowed_sign_in_providers;
  return (
    campaign.identity === "phone" || (Array.isArray(providers) && !providers.includes("anonymous"))
  );
}

function render(state) {
  lastState = state;
  const { status, campaign } = state;
  main.dataset.status = status;
  show(status);
  setText(statusLine, MESSAGES[status](state));

  if (campaign) {
    setText($("#title"), campaign.title);
    setText($("#limit"), describeLimit(campaign));
    document.title = `${campaign.title} – get your code`;
    const opens = new Date(campaign.starts_at);
    setText(
      $("#starts-at"),
      `Opens ${opens.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })}`,
    );
  }
  if (state.remaining != null) {
    const remaining = $('[data-testid="remaining"]');
    setText(remaining, numbers.format(state.remaining));
    setText($(".stock-label"), state.remaining === 1 ? "code left" : "codes left");
    remaining.parentElement.classList.toggle("low", state.remaining > 0 && state.remaining <= 10);
  }
  if (status === "not_started") renderCountdown(state.startsInMs);
  if (status === "waiting")
    setText($("#estimate"), describeWait(state.waiting?.estimatedWaitSeconds));
  if (status === "claimed") {
    setText($("#code"), state.code);
    renderValidity(state.claim);
    if (lastStatus !== "claimed" && lastStatus !== null) copyButton.focus();
  }

  // A sale that counts phone numbers keeps the code with the number already.
  keeper?.render(status === "claimed", { offered: !needsPhone(campaign) });
  renderFairDrop(state);

  if (phone?.open) button.hidden = true; // the sign-in form's buttons lead the way meanwhile
  const [label, enabled] = BUTTON[status] ?? ["Get my code", false];
  setText(button, label);
  // A sale that does not exist: nothing to retry and no stock to show.
  const unknown = status === "error" && state.error?.code === "CAMPAIGN_NOT_FOUND";
  button.hidden ||= unknown;
  if (unknown) $(".stock").hidden = true;
  button.disabled = !enabled || unknown;
  button.setAttribute("aria-busy", String(status === "claiming"));
  lastStatus = status;
}

/** A fair drop's panel: join before the start; the entry, its drawn place and the proof. */
function renderFairDrop(state) {
  const { status, campaign, entry } = state;
  const panel = $("#fair-drop");
  panel.hidden = !campaign?.pre_queue_opens_at || !client;
  if (panel.hidden) return;
  $("#proof-link").href = client.proofUrl;
  const open = status === "not_started" && Date.now() >= Date.parse(campaign.pre_queue_opens_at);
  $("#join").hidden = Boolean(entry) || !open;
  $("#entry").hidden = !entry;
  if (!entry) return;
  setText($("#entry-id"), entry.entryId);
  setText(
    $("#place"),
    entry.place == null ? "drawn at the start" : `#${numbers.format(entry.place)}`,
  );
  // After the start, ask for the drawn place (joining again answers it) every 2 s until it
  // comes: on a timer, since nothing else may render again (the code can come first).
  const started = Date.now() >= Date.parse(campaign.starts_at);
  if (entry.place == null && started && entryAsk === null) {
    entryAsk = setTimeout(() => {
      entryAsk = null;
      // Answered: the state changes and renders again; not drawn yet: ask once more.
      client.join().then(
        () => render(client.state),
        () => render(client.state),
      );
    }, 2000);
  }
}

async function joinDrop() {
  try {
    await client.join();
    void client.claim(); // the claim waits for the start, then queues with the drawn place
  } catch (error) {
    setText($("#fair-hint"), error.message ?? "Could not join the drop.");
  }
}

function fail(message) {
  main.dataset.status = "error";
  show("error");
  setText(statusLine, message);
  button.disabled = true;
}

async function copyCode() {
  const code = $("#code").textContent;
  try {
    await navigator.clipboard.writeText(code);
  } catch {
    // No clipboard permission: select the code so the shopper can copy it themselves.
    const range = document.createRange();
    range.selectNodeContents($("#code"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    setText($("#announce"), "Your code is selected: copy it with your keyboard or menu.");
    return;
  }
  setText(copyButton, "Copied!");
  setText($("#announce"), `Code ${code} copied to the clipboard.`);
  setTimeout(() => setText(copyButton, "Copy code"), 2000);
}

async function main_() {
  let config;
  try {
    const response = await fetch("./config.json", { cache: "no-store" });
    if (!response.ok) throw new Error(`config.json answered ${response.status}`);
    config = await response.json();
  } catch (error) {
    console.error(error);
    fail("This page is not configured yet (config.json is missing).");
    return;
  }
  const campaignId = new URLSearchParams(location.search).get("campaign") ?? config.campaignId;
  if (!campaignId) {
    fail("Which sale? Add ?campaign=<campaign id> to the address.");
    return;
  }
  const shopper = createShopperAuth(config);
  phone = createPhoneSignIn(shopper, () => lastState && render(lastState));
  const campaign = () => lastState?.campaign;
  const drop = createCodedrop({
    apiBase: config.apiBase,
    campaignId,
    getIdToken: (forceRefresh) =>
      shopper.getIdToken(forceRefresh, { phone: needsPhone(campaign()) }),
    signIn: () => (needsPhone(campaign()) ? phone.signIn() : shopper.signIn()),
    getAppCheckToken: shopper.getAppCheckToken,
    refreshIntervalMs: config.refreshIntervalMs ?? 5000,
  });
  keeper = createKeeper(shopper.auth);
  await keeper.start();
  // Signed in here as the shopper who holds a code elsewhere: start afresh as them.
  keeper.listen(() => location.reload());
  client = drop;
  drop.subscribe(render);
  button.addEventListener("click", () => drop.claim());
  $("#join").addEventListener("click", joinDrop);
  copyButton.addEventListener("click", copyCode);
  addEventListener("pagehide", () => drop.stop());
  await drop.start();
}

main_();
