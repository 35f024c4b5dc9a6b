// The audit log: every change an admin made through admin_api (who, what, when, before and
// after), newest first, for one campaign or for all.

import { explain } from "./api.js";
import { fmt, h } from "./dom.js";

const ACTION_WORDS = {
  create: "Created the campaign",
  update: "Changed the campaign",
  pause: "Paused the sale",
  resume: "Resumed the sale",
  end: "Ended the sale",
  archive: "Archived the campaign",
  delete: "Deleted the campaign",
  upload: "Uploaded codes",
  generate: "Generated codes",
  export: "Exported",
  reconcile: "Recounted the campaign",
  "webhook.create": "Added a webhook",
  "webhook.delete": "Deleted a webhook",
  "webhook.test": "Sent a webhook a test event",
  "webhook.redeliver": "Sent a webhook delivery again",
  "webhook.rotate_secret": "Gave a webhook a new secret",
};

export async function renderAudit(ctx, slot, campaignId) {
  const query = campaignId ? `?campaign_id=${encodeURIComponent(campaignId)}` : "";
  const list = h("ol", {
    class: "audit",
    dataset: { testid: "audit-log" },
    "aria-label": "Changes, newest first",
  });
  slot.append(h("section", { class: "card" }, campaignId ? h("h2", {}, "Audit log") : null, list));
  try {
    const { entries } = await ctx.api.call("GET", `/v1/audit${query}`);
    list.replaceChildren(
      ...(entries.length
        ? entries.map(entry)
        : [h("li", { class: "hint" }, "No changes recorded yet.")]),
    );
  } catch (failure) {
    if (failure?.status !== 401)
      list.replaceChildren(h("li", { class: "form-error" }, explain(failure)));
  }
}

function entry(item) {
  const who = item.actor?.email ?? item.actor?.uid ?? "someone";
  const changes = changedFields(item);
  return h(
    "li",
    { dataset: { action: item.action } },
    h(
      "p",
      {},
      h("strong", {}, ACTION_WORDS[item.action] ?? item.action),
      " ",
      h("span", { class: "tag mono" }, item.action),
      " · ",
      h("span", { class: "mono" }, item.target ?? ""),
    ),
    h(
      "p",
      { class: "hint" },
      `${who} · `,
      h("time", { datetime: item.at }, fmt.exactTime(item.at)),
    ),
    changes.length
      ? h(
          "table",
          { class: "table compact" },
          h("caption", { class: "sr-only" }, "Before and after"),
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col" }, "Field"),
              h("th", { scope: "col" }, "Before"),
              h("th", { scope: "col" }, "After"),
            ),
          ),
          h(
            "tbody",
            {},
            changes.map(([name, before, after]) =>
              h("tr", {}, h("td", {}, name), h("td", {}, before), h("td", {}, after)),
            ),
          ),
        )
      : null,
  );
}

function changedFields(item) {
  const before = item.before ?? {};
  const after = item.after ?? {};
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])];
  return names.map((name) => [name, shown(before[name]), shown(after[name])]);
}

function shown(value) {
  if (value === undefined || value === null) return "–";
  if (typeof value === "string" && /^\d{4}-\d\d-\d\dT/.test(value)) return fmt.exactTime(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}
