// Webhooks: endpoints that receive the campaign's events, signed with a secret shown once when
// the webhook is created; recent deliveries per endpoint.

import { explain } from "./api.js";
import { announce, field, fmt, formError, h, section } from "./dom.js";

const EVENTS = {
  "coupon.claimed": "A code is claimed",
  "coupon.redeemed": "A code is used at checkout",
  "coupon.released": "A held code returns to the pool",
  "codes.imported": "Codes are imported",
  "codes.assigned": "Codes are assigned",
  "campaign.low_stock": "Stock runs low",
  "campaign.sold_out": "The sale sells out",
};

export function renderWebhooks(ctx, slot, campaign) {
  const path = `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}/webhooks`;
  const url = h("input", {
    type: "url",
    required: true,
    placeholder: "https://example.com/codedrop",
    autocomplete: "off",
  });
  const boxes = Object.entries(EVENTS).map(([value, label]) => {
    const box = h("input", {
      type: "checkbox",
      value,
      id: `ev-${value.replace(".", "-")}`,
      checked: value === "coupon.claimed",
    });
    return h(
      "div",
      { class: "check" },
      box,
      h("label", { for: box.id }, label, " ", h("span", { class: "mono hint" }, value)),
    );
  });
  const error = formError();
  const secret = h("div", { class: "secret", role: "status" });
  const list = h("div", { class: "jobs" });
  const form = h(
    "form",
    { class: "form", novalidate: true, "aria-label": "New webhook" },
    field("Endpoint address", url),
    h("fieldset", {}, h("legend", {}, "Send these events"), boxes),
    error,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "button button-primary" }, "Add the webhook"),
    ),
  );
  slot.append(
    section(
      { id: "webhooks", title: "Webhooks", testid: "webhooks" },
      form,
      secret,
      h("h3", {}, "Endpoints"),
      list,
    ),
  );

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    secret.replaceChildren();
    const events = boxes
      .map((b) => b.querySelector("input"))
      .filter((b) => b.checked)
      .map((b) => b.value);
    if (!url.value.trim()) return void (error.textContent = "Enter the endpoint's address.");
    if (!events.length) return void (error.textContent = "Choose at least one event.");
    try {
      const created = await ctx.api.call("POST", path, { body: { url: url.value.trim(), events } });
      showSecret(created);
      announce("Webhook added. Copy its signing secret now: it is shown only once.");
      url.value = "";
      refresh();
    } catch (failure) {
      error.textContent = explain(failure);
    }
  });

  function showSecret(created) {
    secret.replaceChildren(
      h("p", {}, h("strong", {}, "Copy this signing secret now: it is shown only once.")),
      h("p", {}, "For ", h("span", { class: "mono" }, created.url), ":"),
      h("p", { class: "mono", dataset: { testid: "webhook-secret" } }, created.secret),
      h("p", { class: "hint" }, "Your endpoint checks each delivery's signature with it."),
    );
  }

  async function act(path_, done) {
    try {
      const answer = await ctx.api.call("POST", path_);
      done(answer);
    } catch (failure) {
      ctx.say(explain(failure));
    }
  }

  async function refresh() {
    try {
      const { webhooks } = await ctx.api.call("GET", path);
      list.replaceChildren(
        ...(webhooks.length ? webhooks.map(card) : [h("p", { class: "hint" }, "No webhooks yet.")]),
      );
    } catch (failure) {
      if (failure?.status !== 401) ctx.say(explain(failure));
    }
  }

  function card(webhook) {
    const deliveries = h("div", {});
    const remove = h("button", { type: "button", class: "button button-quiet" }, "Delete");
    const show = h(
      "button",
      { type: "button", class: "button button-quiet", "aria-expanded": "false" },
      "Recent deliveries",
    );
    const base = `${path}/${encodeURIComponent(webhook.webhook_id)}`;
    const test = h("button", { type: "button", class: "button button-quiet" }, "Send a test event");
    test.addEventListener("click", () =>
      act(`${base}:test`, () => {
        ctx.say("A test event is on its way: it shows in the recent deliveries.", "ok");
        if (show.getAttribute("aria-expanded") === "true") loadDeliveries();
      }),
    );
    const rotate = h("button", { type: "button", class: "button button-quiet" }, "New secret");
    rotate.addEventListener("click", () => {
      if (
        !window.confirm(
          `Give ${webhook.url} a new signing secret? The current one stops working at once.`,
        )
      )
        return;
      act(`${base}:rotate_secret`, (created) => {
        showSecret(created);
        announce("New signing secret made. Copy it now: it is shown only once.");
      });
    });
    remove.addEventListener("click", async () => {
      if (!window.confirm(`Stop sending events to ${webhook.url}?`)) return;
      try {
        await ctx.api.call("DELETE", `${path}/${encodeURIComponent(webhook.webhook_id)}`);
        announce("Webhook deleted.");
        refresh();
      } catch (failure) {
        ctx.say(explain(failure));
      }
    });
    show.addEventListener("click", () => {
      if (show.getAttribute("aria-expanded") === "true") {
        show.setAttribute("aria-expanded", "false");
        deliveries.replaceChildren();
        return;
      }
      loadDeliveries();
    });
    async function loadDeliveries() {
      try {
        const answer = await ctx.api.call(
          "GET",
          `${path}/${encodeURIComponent(webhook.webhook_id)}/deliveries`,
        );
        show.setAttribute("aria-expanded", "true");
        deliveries.replaceChildren(
          answer.deliveries.length
            ? h(
                "div",
                { class: "table-wrap" },
                h(
                  "table",
                  { class: "table compact" },
                  h("caption", { class: "sr-only" }, `Recent deliveries to ${webhook.url}`),
                  h(
                    "thead",
                    {},
                    h(
                      "tr",
                      {},
                      ["Event", "State", "Attempts", "Last answer", "Next attempt", "Again"].map(
                        (t) => h("th", { scope: "col" }, t),
                      ),
                    ),
                  ),
                  h(
                    "tbody",
                    {},
                    answer.deliveries.map((d) =>
                      h(
                        "tr",
                        {},
                        h("td", {}, d.event_type, h("div", { class: "mono hint" }, d.event_id)),
                        h("td", {}, d.state),
                        h("td", { class: "num" }, String(d.attempts)),
                        h("td", {}, d.last_status ? String(d.last_status) : (d.last_error ?? "–")),
                        h("td", {}, fmt.exactTime(d.next_attempt_at)),
                        h(
                          "td",
                          {},
                          h(
                            "button",
                            {
                              type: "button",
                              class: "button button-quiet",
                              "aria-label": `Send ${d.event_type} ${d.event_id} again`,
                              onclick: () =>
                                act(
                                  `${base}/deliveries/${encodeURIComponent(d.event_id)}:redeliver`,
                                  () => {
                                    ctx.say("Sent again: a new day of retries starts now.", "ok");
                                    loadDeliveries();
                                  },
                                ),
                            },
                            "Send again",
                          ),
                        ),
                      ),
                    ),
                  ),
                ),
              )
            : h("p", { class: "hint" }, "Nothing delivered yet."),
        );
      } catch (failure) {
        ctx.say(explain(failure));
      }
    }
    return h(
      "article",
      { class: "job", dataset: { webhookId: webhook.webhook_id } },
      h("h4", { class: "mono" }, webhook.url),
      h(
        "p",
        { class: "hint" },
        webhook.events.map((e) => EVENTS[e] ?? e).join(", "),
        ` · added ${fmt.time(webhook.created_at)}`,
      ),
      h("div", { class: "actions" }, show, test, rotate, remove),
      deliveries,
    );
  }

  refresh();
}
