// Sending one of the page's forms: its button disabled and announced busy meanwhile, the form's
// error cleared first and, if sending fails, set to what the shopper can do about it.

/**
 * Runs `work` while `form`'s button is busy.
 * @param form the form whose button is disabled meanwhile
 * @param work async function: what sending the form does
 * @param options `showError(text)` shows the form's error ("" clears it); `describe(failure)`
 *   turns a failure into that text; `what` names the failure in the console's warning
 */
export async function whileSending(form, work, { showError, describe, what }) {
  const button = form.querySelector("button");
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  showError("");
  try {
    await work();
  } catch (failure) {
    console.warn(what, failure);
    showError(describe(failure));
  } finally {
    button.disabled = false;
    button.setAttribute("aria-busy", "false");
  }
}
