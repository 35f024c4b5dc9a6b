// Who claimed what: the campaign's claims a page at a time (admin_api reads only the claims it
// lists), for a marketer answering a shopper; exports give finance the whole list.

import { explain } from "./api.js";
import { fmt, h, section } from "./dom.js";

const PAGE = 50;

export function renderClaims(ctx, slot, campaign) {
  const path = `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}/claims`;
  const body = h("tbody", {});
  const more = h(
    "button",
    { type: "button", class: "button button-secondary", hidden: true },
    "Show more",
  );
  const empty = h("p", { class: "hint", hidden: true }, "Nobody has claimed a code yet.");
  slot.append(
    section(
      { id: "claims", title: "Who claimed what", testid: "claims" },
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "table compact" },
          h("caption", { class: "sr-only" }, "Claims"),
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Code", "Shopper", "State", "Claimed", "Order"].map((t) =>
                h("th", { scope: "col" }, t),
              ),
            ),
          ),
          body,
        ),
      ),
      empty,
      h("div", { class: "actions" }, more),
    ),
  );
  let token = null;

  async function load() {
    more.disabled = true;
    try {
      const query = new URLSearchParams({ limit: String(PAGE) });
      if (token) query.set("page_token", token);
      const page = await ctx.api.call("GET", `${path}?${query}`);
      body.append(
        ...page.claims.map((claim) =>
          h(
            "tr",
            {},
            h("td", { class: "mono" }, claim.code),
            h("td", { class: "mono" }, claim.user_id),
            h("td", {}, claim.state),
            h("td", {}, fmt.exactTime(claim.claimed_at)),
            h("td", { class: "mono" }, claim.order_id ?? "–"),
          ),
        ),
      );
      token = page.next_page_token;
      more.hidden = !token;
      empty.hidden = body.children.length > 0;
    } catch (failure) {
      if (failure?.status !== 401) ctx.say(explain(failure));
    } finally {
      more.disabled = false;
    }
  }
  more.addEventListener("click", load);
  load();
}
