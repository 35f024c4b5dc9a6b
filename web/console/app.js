// The drop control room: campaigns, codes, the live sale, exports, webhooks and the audit log,
// on admin_api. Plain modules, no framework: one view at a time in <main>, chosen by the URL's
// hash (#/, #/audit, #/c/{campaign_id}/{tab}) so the browser's back button and links work.
//
// config.json (served by the local stack; write your own for production):
//   {"adminApiBase": "<admin_api base URL>", "firebase": {apiKey, authDomain, projectId},
//    "authEmulatorUrl": null}

import { createApi, explain } from "./api.js";
import { createAdminAuth } from "./auth.js";
import { renderAdmins } from "./admins.js";
import { renderAudit } from "./audit.js";
import { renderClaims } from "./claims.js";
import { renderCodes } from "./codes.js";
import { fmt, fromLocalInput, h, toLocalInput, field, announce, onSubmit } from "./dom.js";
import { renderExports } from "./exports.js";
import { renderLive } from "./live.js";
import { renderWebhooks } from "./webhooks.js";

const main = document.getElementById("main");
const EXPIRED = "Your sign-in has expired. Sign in again to carry on.";
const notice = document.getElementById("notice");
const TABS = {
  live: renderLive,
  settings: renderSettings,
  codes: renderCodes,
  claims: renderClaims,
  exports: renderExports,
  webhooks: renderWebhooks,
  audit: (ctx, slot, campaign) => renderAudit(ctx, slot, campaign.campaign_id),
};

let ctx = null;
let cleanup = () => {};
// A confirmation to show once the next view is open (set before changing the hash).
let pending = null;

// Where each view draws what it loads; emptied when another view shows, so no hidden copy of
// a view (its test ids, its timers' targets) stays behind.
const SLOTS = {
  campaign: "tab",
  audit: "audit-slot",
  admins: "admins-slot",
  campaigns: "campaign-form-slot",
};

function show(view) {
  main.dataset.view = view;
  for (const element of main.querySelectorAll("[data-show]")) {
    element.hidden = element.dataset.show !== view;
  }
  for (const [owner, slot] of Object.entries(SLOTS)) {
    if (owner !== view) document.getElementById(slot).replaceChildren();
  }
}

/** A message above the page (errors that are not about one form), until the next view. */
function say(text, kind = "error") {
  notice.textContent = text;
  notice.dataset.kind = kind;
  notice.hidden = !text;
}

// --- campaigns ------------------------------------------------------------------------------

async function showCampaigns() {
  show("campaigns");
  const rows = document.getElementById("campaign-rows");
  const archived = document.getElementById("show-archived").checked;
  const { campaigns } = await ctx.api.call("GET", `/v1/campaigns?include_archived=${archived}`);
  rows.replaceChildren(
    ...campaigns.map((c) =>
      h(
        "tr",
        { dataset: { testid: "campaign-row", campaignId: c.campaign_id } },
        h(
          "td",
          {},
          h("a", { href: `#/c/${encodeURIComponent(c.campaign_id)}/live` }, c.title),
          h("div", { class: "mono hint" }, c.campaign_id),
        ),
        h(
          "td",
          {},
          h("span", { class: `status status-${c.status}` }, fmt.status(c.status)),
          c.archived ? h("span", { class: "hint" }, " · archived") : "",
        ),
        h("td", {}, fmt.window(c)),
        h("td", { class: "num", "data-label": "Claimed" }, fmt.count(c.stats?.claimed)),
        h("td", { class: "num", "data-label": "Remaining" }, fmt.count(c.stats?.remaining)),
      ),
    ),
  );
  document.getElementById("campaigns-empty").hidden = campaigns.length > 0;
}

const FORM_FIELDS = [
  "title",
  "starts_at",
  "ends_at",
  "max_per_user",
  "admissions_per_second",
  "waiting_room_enabled",
  "hold_seconds",
  "low_stock_threshold",
];

/** The create or edit form; `campaign` null creates. Resolves with the saved campaign. */
function campaignForm(loaded, { onSaved, onCancel }) {
  let campaign = loaded;
  const now = new Date();
  now.setSeconds(0, 0);
  const start = campaign ? campaign.starts_at : new Date(now.getTime() + 3600_000).toISOString();
  const end = campaign ? campaign.ends_at : new Date(now.getTime() + 25 * 3600_000).toISOString();
  const inputs = {
    title: h("input", {
      name: "title",
      required: true,
      maxlength: "200",
      value: campaign?.title ?? "",
    }),
    campaign_id: h("input", {
      name: "campaign_id",
      pattern: "[a-z0-9][a-z0-9-]{2,62}",
      autocomplete: "off",
      spellcheck: "false",
    }),
    starts_at: h("input", {
      name: "starts_at",
      type: "datetime-local",
      required: true,
      value: toLocalInput(start),
    }),
    ends_at: h("input", {
      name: "ends_at",
      type: "datetime-local",
      required: true,
      value: toLocalInput(end),
    }),
    max_per_user: h("input", {
      name: "max_per_user",
      type: "number",
      min: "1",
      max: "10",
      required: true,
      value: String(campaign?.max_per_user ?? 1),
    }),
    admissions_per_second: h("input", {
      name: "admissions_per_second",
      type: "number",
      min: "0.1",
      step: "any",
      required: true,
      value: String(campaign?.admissions_per_second ?? 100),
    }),
    waiting_room_enabled: h("input", {
      name: "waiting_room_enabled",
      type: "checkbox",
      checked: campaign?.waiting_room_enabled ?? false,
    }),
    hold_seconds: h("input", {
      name: "hold_seconds",
      type: "number",
      min: "60",
      max: "86400",
      value: campaign?.hold_seconds == null ? "" : String(campaign.hold_seconds),
    }),
    low_stock_threshold: h("input", {
      name: "low_stock_threshold",
      type: "number",
      min: "0",
      value: campaign?.low_stock_threshold == null ? "" : String(campaign.low_stock_threshold),
    }),
  };
  const error = h("div", { class: "form-error", role: "alert" });
  const values = () => {
    const optional = (input) => (input.value === "" ? null : Number(input.value));
    return {
      title: inputs.title.value.trim(),
      starts_at: fromLocalInput(inputs.starts_at.value),
      ends_at: fromLocalInput(inputs.ends_at.value),
      max_per_user: Number(inputs.max_per_user.value),
      admissions_per_second: Number(inputs.admissions_per_second.value),
      waiting_room_enabled: inputs.waiting_room_enabled.checked,
      hold_seconds: optional(inputs.hold_seconds),
      low_stock_threshold: optional(inputs.low_stock_threshold),
    };
  };
  const save = h(
    "button",
    { type: "submit", class: "button button-primary", dataset: { testid: "save" } },
    campaign ? "Save changes" : "Create campaign",
  );

  const form = h(
    "form",
    {
      class: "card form",
      dataset: { testid: "campaign-form" },
      novalidate: true,
      "aria-label": campaign ? "Campaign settings" : "New campaign",
    },
    campaign ? null : h("h2", {}, "New campaign"),
    field("Title", inputs.title, "What shoppers see on the landing page."),
    campaign
      ? null
      : field(
          "Campaign id (optional)",
          inputs.campaign_id,
          "Lower-case letters, digits and dashes; made from the title when left empty. It appears in the sale's link.",
        ),
    h(
      "div",
      { class: "row" },
      field("Sale opens", inputs.starts_at),
      field("Sale closes", inputs.ends_at),
    ),
    h(
      "div",
      { class: "row" },
      field("Codes per shopper", inputs.max_per_user),
      field(
        "Low-stock alert at",
        inputs.low_stock_threshold,
        "Remaining codes that trigger a webhook; empty for none.",
      ),
    ),
    h(
      "div",
      { class: "row" },
      field(
        "Admission rate (shoppers a second)",
        inputs.admissions_per_second,
        "How fast the waiting room lets shoppers in.",
      ),
      field(
        "Hold codes for (seconds)",
        inputs.hold_seconds,
        "Empty: a claim is final. A number: unredeemed codes return to the pool after it.",
      ),
    ),
    h(
      "div",
      { class: "check" },
      inputs.waiting_room_enabled,
      h(
        "label",
        { for: (inputs.waiting_room_enabled.id = `wr-${Math.random().toString(36).slice(2, 7)}`) },
        "Use the waiting room when shoppers arrive faster than the admission rate",
      ),
    ),
    error,
    h(
      "div",
      { class: "actions" },
      save,
      onCancel
        ? h("button", { type: "button", class: "button button-quiet", onclick: onCancel }, "Cancel")
        : null,
    ),
  );

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.replaceChildren();
    if (!inputs.title.value.trim()) {
      error.textContent = "Give the campaign a title.";
      inputs.title.focus();
      return;
    }
    if (!inputs.starts_at.value || !inputs.ends_at.value) {
      error.textContent = "Choose when the sale opens and closes.";
      return;
    }
    const wanted = values();
    save.disabled = true;
    try {
      let saved;
      if (campaign) {
        const changes = Object.fromEntries(
          FORM_FIELDS.filter((name) => !sameValue(campaign[name], wanted[name])).map((name) => [
            name,
            wanted[name],
          ]),
        );
        if (Object.keys(changes).length === 0) {
          error.textContent = "Nothing changed.";
          return;
        }
        saved = await updateCampaign(campaign, changes);
      } else {
        const body = { ...wanted };
        for (const name of ["hold_seconds", "low_stock_threshold"])
          if (body[name] === null) delete body[name];
        if (inputs.campaign_id.value.trim()) body.campaign_id = inputs.campaign_id.value.trim();
        saved = await ctx.api.call("POST", "/v1/campaigns", { body });
      }
      onSaved(saved);
    } catch (failure) {
      showFormError(error, failure);
      // Saving again applies this admin's values over the other admin's, knowingly.
      if (failure?.code === "CAMPAIGN_CHANGED" && failure.body?.current)
        campaign = failure.body.current;
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

function sameValue(a, b) {
  if (
    typeof a === "string" &&
    typeof b === "string" &&
    !Number.isNaN(Date.parse(a)) &&
    a.includes("T")
  ) {
    return Date.parse(a) === Date.parse(b);
  }
  return (a ?? null) === (b ?? null);
}

/** A form's error: the sentence, and for a refused save the other admin's changes. */
function showFormError(slot, failure) {
  slot.replaceChildren(h("p", {}, explain(failure)));
  const changes = failure?.body?.changes;
  if (failure?.code === "CAMPAIGN_CHANGED" && Array.isArray(changes) && changes.length) {
    slot.append(
      h(
        "ul",
        { class: "changes", dataset: { testid: "conflict-changes" } },
        changes.map((entry) =>
          h(
            "li",
            {},
            `${entry.actor?.email ?? entry.actor?.uid ?? "Someone"} at ${fmt.exactTime(entry.at)}: `,
            describeChange(entry),
          ),
        ),
      ),
    );
  }
}

/** "title: Spring → Summer; paused: false → true" */
export function describeChange(entry) {
  const before = entry.before ?? {};
  const after = entry.after ?? {};
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])];
  if (!names.length) return entry.action;
  return names.map((name) => `${name}: ${show_(before[name])} → ${show_(after[name])}`).join("; ");
}

function show_(value) {
  if (value === undefined || value === null) return "none";
  if (typeof value === "string" && value.includes("T") && !Number.isNaN(Date.parse(value))) {
    return fmt.exactTime(value);
  }
  return String(value);
}

/** PATCH a campaign from the version the admin loaded: a save over someone else's edit is
 * refused by admin_api (409 CAMPAIGN_CHANGED), never silently applied. */
function updateCampaign(campaign, changes) {
  return ctx.api.call("PATCH", `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}`, {
    body: changes,
    headers: { "If-Match": `"${campaign.version}"` },
  });
}

async function renderSettings(context, slot, campaign) {
  slot.append(
    campaignForm(campaign, {
      onSaved: (saved) => {
        announce("Changes saved.");
        context.showCampaign(saved, "settings", "Changes saved.");
      },
    }),
  );
}

// --- one campaign ---------------------------------------------------------------------------

async function openCampaign(campaignId, tab) {
  const campaign = await ctx.api.call("GET", `/v1/campaigns/${encodeURIComponent(campaignId)}`);
  showCampaign(campaign, TABS[tab] ? tab : "live");
}

function showCampaign(campaign, tab, message) {
  cleanup();
  cleanup = () => {};
  show("campaign");
  if (message) say(message, "ok");
  document.getElementById("campaign-title").textContent = campaign.title;
  document.getElementById("campaign-id").textContent = campaign.campaign_id;
  const status = document.getElementById("campaign-status");
  status.textContent = fmt.status(campaign.status);
  status.className = `status status-${campaign.status}`;
  document.getElementById("campaign-window").textContent = fmt.window(campaign);
  const ended = campaign.status === "ended";
  document.getElementById("pause").hidden = campaign.paused || ended;
  document.getElementById("resume").hidden = !campaign.paused || ended;
  document.getElementById("end").hidden = ended;
  document.getElementById("archive").hidden = !ended || campaign.archived;
  document.getElementById("delete").hidden = !deletable(campaign);
  ctx.campaign = campaign;
  const base = `#/c/${encodeURIComponent(campaign.campaign_id)}/`;
  for (const link of document.querySelectorAll(".tabs a")) {
    link.href = base + link.dataset.tab;
    if (link.dataset.tab === tab) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const slot = document.getElementById("tab");
  slot.replaceChildren();
  const stop = TABS[tab](ctx, slot, campaign);
  Promise.resolve(stop).then((fn) => {
    if (typeof fn === "function") cleanup = fn;
  }, fail);
}

async function setPaused(paused) {
  const campaign = ctx.campaign;
  const button = document.getElementById(paused ? "pause" : "resume");
  button.disabled = true;
  try {
    const saved = await updateCampaign(campaign, { paused });
    const tab = location.hash.split("/")[3] || "live";
    showCampaign(
      saved,
      tab,
      paused
        ? "The sale is paused: shoppers cannot claim codes until you resume it."
        : "The sale is running again.",
    );
    document.getElementById(paused ? "resume" : "pause").focus();
  } catch (failure) {
    say(explain(failure));
  } finally {
    button.disabled = false;
  }
}

/** What admin_api deletes: an archived campaign, or one that never started (not even a fair
 * drop's pre-queue); it also refuses one whose codes were assigned before the sale. */
function deletable(campaign) {
  const opens = Date.parse(campaign.starts_at) - (campaign.pre_queue_seconds ?? 0) * 1000;
  return campaign.archived || Date.now() < opens;
}

/** Delete the campaign with everything it holds, once the admin typed its id (nothing brings it
 * back; the audit log keeps the record). */
async function remove() {
  const campaign = ctx.campaign;
  const typed = window.prompt(
    `Delete “${campaign.title}” for good? Its codes, claims, counters, webhooks, jobs and files are removed; ` +
      `the audit log keeps a record. Type the campaign id, ${campaign.campaign_id}, to delete it.`,
  );
  if (typed === null) return;
  if (typed.trim() !== campaign.campaign_id) {
    say(`Nothing was deleted: “${typed}” is not this campaign's id.`);
    return;
  }
  const button = document.getElementById("delete");
  button.disabled = true;
  try {
    await ctx.api.call("DELETE", `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}`);
    pending = `“${campaign.title}” is deleted; its codes, claims and files are being removed.`;
    location.hash = "#/";
  } catch (failure) {
    say(explain(failure));
  } finally {
    button.disabled = false;
  }
}

/** End the sale now, or archive an ended campaign (left out of the list, its data kept). */
async function finish(action) {
  const campaign = ctx.campaign;
  const question =
    action === "end"
      ? `End “${campaign.title}” now? Shoppers can no longer claim codes, and an ended sale cannot be reopened.`
      : `Archive “${campaign.title}”? It leaves the campaign list; its claims, exports and audit log are kept.`;
  if (!window.confirm(question)) return;
  try {
    const saved = await ctx.api.call(
      "POST",
      `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}:${action}`,
    );
    if (action === "archive") {
      pending = `“${campaign.title}” is archived.`;
      location.hash = "#/";
      return;
    }
    showCampaign(saved, location.hash.split("/")[3] || "live", "The sale has ended.");
  } catch (failure) {
    say(explain(failure));
  }
}

// --- the shell ------------------------------------------------------------------------------

function fail(failure) {
  if (failure?.status === 401) return; // onExpired already showed the sign-in
  say(explain(failure));
}

async function route() {
  if (!ctx?.admin) return;
  cleanup();
  cleanup = () => {};
  say(pending ?? "", "ok");
  pending = null;
  const [, first, id, tab] = location.hash.split("/");
  try {
    if (first === "c" && id) await openCampaign(decodeURIComponent(id), tab);
    else if (first === "admins") {
      show("admins");
      const slot = document.getElementById("admins-slot");
      slot.replaceChildren();
      await renderAdmins(ctx, slot);
    } else if (first === "audit") {
      show("audit");
      const slot = document.getElementById("audit-slot");
      slot.replaceChildren();
      await renderAudit(ctx, slot, null);
    } else await showCampaigns();
  } catch (failure) {
    fail(failure);
  }
}

async function loadConfig() {
  const response = await fetch("./config.json", { cache: "no-store" });
  if (!response.ok) throw new Error(`config.json answered ${response.status}`);
  return response.json();
}

async function start() {
  let config;
  try {
    config = await loadConfig();
  } catch {
    show("none");
    say("The console is not configured yet (its config.json is missing).");
    return;
  }
  const auth = createAdminAuth(config);
  let expired = false;
  const api = createApi({
    base: config.adminApiBase,
    auth,
    onExpired: () => {
      expired = true;
      // Firebase may have signed the admin out already (a refused renewal): then no sign-out
      // event comes, and the sign-in is shown here.
      auth.signOut().then(() => {
        if (!expired) return;
        expired = false;
        show("sign-in");
        say(EXPIRED);
      });
    },
  });
  ctx = { api, auth, config, admin: false, campaign: null, showCampaign, say };

  const signIn = document.getElementById("sign-in-form");
  onSubmit(
    signIn,
    document.getElementById("sign-in-error"),
    (failure) => failure.message,
    async () => {
      await auth.signIn(signIn.email.value.trim(), signIn.password.value);
      signIn.password.value = "";
    },
  );
  // Signing out ends the admin's sessions on the server too (revoked there, not only forgotten
  // here); the browser signs out whatever that call answers.
  document.getElementById("sign-out").addEventListener("click", () =>
    api
      .call("POST", "/v1/me:sign_out")
      .catch(() => null)
      .finally(() => auth.signOut()),
  );
  document.getElementById("new-campaign").addEventListener("click", () => {
    const slot = document.getElementById("campaign-form-slot");
    if (slot.firstChild) return slot.querySelector("input")?.focus();
    const form = campaignForm(null, {
      onSaved: (saved) => {
        slot.replaceChildren();
        pending = `Campaign “${saved.title}” created. Next: load its codes.`;
        location.hash = `#/c/${encodeURIComponent(saved.campaign_id)}/codes`;
      },
      onCancel: () => slot.replaceChildren(),
    });
    slot.replaceChildren(form);
    form.querySelector("input").focus();
  });
  document.getElementById("pause").addEventListener("click", () => setPaused(true));
  document.getElementById("resume").addEventListener("click", () => setPaused(false));
  document.getElementById("end").addEventListener("click", () => finish("end"));
  document.getElementById("archive").addEventListener("click", () => finish("archive"));
  document.getElementById("delete").addEventListener("click", remove);
  document
    .getElementById("show-archived")
    .addEventListener("change", () => showCampaigns().catch(fail));
  window.addEventListener("hashchange", route);

  auth.onChange(async (user) => {
    cleanup();
    cleanup = () => {};
    document.getElementById("who").hidden = !user;
    document.getElementById("who-email").textContent = user?.email ?? "";
    ctx.admin = false;
    if (!user) {
      show("sign-in");
      say(expired ? EXPIRED : "", "error");
      expired = false;
      return;
    }
    const roles = await auth.roles();
    if (!roles.admin) {
      document.getElementById("not-allowed-email").textContent = user.email ?? user.uid;
      show("not-allowed");
      return;
    }
    Object.assign(ctx, { admin: true, owner: roles.owner, uid: user.uid });
    route();
  });
}

start();
