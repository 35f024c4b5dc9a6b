// Who may use the console: admins, and owners who may also invite and remove them. Inviting
// creates the account if it is new (they sign in with Google or an email link); removing takes
// the roles away and ends their sessions.

import { explain } from "./api.js";
import { announce, field, fmt, formError, h } from "./dom.js";

const ROLE_WORDS = { admin: "Admin", owner: "Owner (may invite and remove admins)" };

export async function renderAdmins(ctx, slot) {
  const list = h("div", { class: "table-wrap" });
  const error = formError();
  const section = h("section", { class: "card", dataset: { testid: "admins" } }, list);
  slot.append(section);

  if (ctx.owner) {
    const email = h("input", { type: "email", required: true, autocomplete: "off" });
    const role = h(
      "select",
      {},
      Object.entries(ROLE_WORDS).map(([value, label]) => h("option", { value }, label)),
    );
    const form = h(
      "form",
      { class: "form", novalidate: true, "aria-label": "Invite an admin" },
      h("h2", {}, "Invite an admin"),
      h("div", { class: "row" }, field("Email", email), field("Role", role)),
      error,
      h(
        "div",
        { class: "actions" },
        h("button", { type: "submit", class: "button button-primary" }, "Invite"),
      ),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.textContent = "";
      if (!email.value.trim()) return void (error.textContent = "Enter their email address.");
      try {
        const invited = await ctx.api.call("POST", "/v1/admins", {
          body: { email: email.value.trim(), role: role.value },
        });
        email.value = "";
        announce(`${invited.email} can now use the console.`);
        ctx.say(`${invited.email} can now use the console: they sign in with that address.`, "ok");
        refresh();
      } catch (failure) {
        error.textContent = explain(failure);
      }
    });
    section.prepend(form);
  } else {
    section.prepend(h("p", { class: "hint" }, "Only owners invite and remove admins."));
  }

  async function refresh() {
    try {
      const { admins } = await ctx.api.call("GET", "/v1/admins");
      list.replaceChildren(
        h(
          "table",
          { class: "table" },
          h("caption", { class: "sr-only" }, "Admins"),
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Email", "Role", "Invited", ""].map((t) => h("th", { scope: "col" }, t)),
            ),
          ),
          h(
            "tbody",
            {},
            admins.map((admin) => row(admin)),
          ),
        ),
      );
    } catch (failure) {
      if (failure?.status !== 401)
        list.replaceChildren(h("p", { class: "form-error" }, explain(failure)));
    }
  }

  function row(admin) {
    const who = admin.email ?? admin.uid;
    const remove =
      ctx.owner && admin.uid !== ctx.uid
        ? h(
            "button",
            {
              type: "button",
              class: "button button-quiet",
              "aria-label": `Remove ${who}`,
              onclick: async () => {
                if (!window.confirm(`Remove ${who}? They are signed out of the console at once.`))
                  return;
                try {
                  await ctx.api.call("DELETE", `/v1/admins/${encodeURIComponent(admin.uid)}`);
                  ctx.say(`${who} can no longer use the console.`, "ok");
                  refresh();
                } catch (failure) {
                  ctx.say(explain(failure));
                }
              },
            },
            "Remove",
          )
        : null;
    return h(
      "tr",
      { dataset: { uid: admin.uid } },
      h("td", { class: "mono" }, who),
      h("td", {}, admin.role === "owner" ? "Owner" : "Admin"),
      h(
        "td",
        {},
        admin.invited_by
          ? `${fmt.time(admin.invited_at)} by ${admin.invited_by}`
          : fmt.time(admin.invited_at),
      ),
      h("td", {}, remove),
    );
  }

  refresh();
}
