// Small DOM and formatting helpers shared by the console's views. Text is always set as text,
// never as HTML: campaign titles, file names and API messages come from other people.

/** An element: h("p", {class: "hint", dataset: {testid: "x"}}, "text", child, ...). */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "class") element.className = value;
    else if (key in element && typeof value !== "string") element[key] = value;
    else element.setAttribute(key, value === true ? "" : value);
  }
  element.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return element;
}

/** A section of a view titled by its h2, which also names it (aria-labelledby); a card unless
 * `card` is false. */
export function section({ id, title, card = true, testid }, ...children) {
  return h(
    "section",
    {
      class: card ? "card" : null,
      dataset: testid ? { testid } : null,
      "aria-labelledby": `${id}-title`,
    },
    h("h2", { id: `${id}-title` }, title),
    ...children,
  );
}

/** Where a form says what went wrong, read out as soon as it is set. */
export function formError() {
  return h("p", { class: "form-error", role: "alert" });
}

const number = new Intl.NumberFormat("en");
const when = new Intl.DateTimeFormat("en", {
  day: "numeric",
  month: "short",
  hour: "2-digit",
  minute: "2-digit",
});
const whenExact = new Intl.DateTimeFormat("en", {
  day: "numeric",
  month: "short",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});

export const fmt = {
  /** A count as people read it: 12,480 ("–" when unknown). */
  count: (value) => (value === null || value === undefined ? "–" : number.format(value)),
  /** A moment in the admin's own time zone. */
  time: (iso) => (iso ? when.format(new Date(iso)) : "–"),
  exactTime: (iso) => (iso ? whenExact.format(new Date(iso)) : "–"),
  window: (campaign) => `${fmt.time(campaign.starts_at)} – ${fmt.time(campaign.ends_at)}`,
  /** A duration in words: "4 min 10 s", "2 h 5 min". */
  duration(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  },
  status: (status) =>
    ({
      scheduled: "Scheduled",
      active: "On sale",
      paused: "Paused",
      ended: "Ended",
      sold_out: "Sold out",
    })[status] ?? status,
};

/** An <input type="datetime-local"> value (the admin's time zone) for an ISO time. */
export function toLocalInput(iso) {
  const date = new Date(iso);
  const local = new Date(date.getTime() - date.getTimezoneOffset() * 60_000);
  return local.toISOString().slice(0, 16);
}

/** The ISO time (UTC) of an <input type="datetime-local"> value. */
export function fromLocalInput(value) {
  return new Date(value).toISOString();
}

/** Tell screen-reader users about something that happened out of their focus. */
export function announce(text) {
  const region = document.getElementById("announce");
  region.textContent = "";
  // A fresh text node after a tick is announced even when the text repeats.
  setTimeout(() => {
    region.textContent = text;
  }, 50);
}

/** Run `action` when `form` is submitted, its button disabled meanwhile; a failure is shown in
 * `error`, in the words `describe` finds for it. */
export function onSubmit(form, error, describe, action) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    const button = form.querySelector("button");
    button.disabled = true;
    try {
      await action();
    } catch (failure) {
      error.textContent = describe(failure);
    } finally {
      button.disabled = false;
    }
  });
}

/** A labelled form field: [label, input] with the input's id tied to the label. */
export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  const parts = [h("label", { for: id }, label), input];
  if (hint) {
    const hintId = `${id}-hint`;
    input.setAttribute("aria-describedby", hintId);
    parts.push(h("p", { class: "hint", id: hintId }, hint));
  }
  return h("div", { class: "field" }, parts);
}
