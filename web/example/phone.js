// Phone sign-in for sales that count phone numbers: the shopper types their number, gets a code
// by text message (from the Auth emulator's log locally), types it, and the claim goes on.

import { whileSending } from "./forms.js";

// keep.js, which links a number to an anonymous account, says the same.
export const PHONE_MESSAGES = {
  "auth/invalid-phone-number":
    "That phone number does not look right: start with + and your country code.",
  "auth/missing-phone-number": "Enter your phone number.",
  "auth/invalid-verification-code": "That code is not the one we sent. Check it and try again.",
  "auth/missing-verification-code": "Enter the code from the text message.",
  "auth/code-expired": "That code has expired: ask for a new one.",
  "auth/too-many-requests": "Too many attempts: wait a moment, then try again.",
};

function describe(error) {
  return PHONE_MESSAGES[error?.code] ?? "We could not sign you in. Please try again.";
}

/**
 * @param shopper the object createShopperAuth() returns
 * @param onChange called when the form opens or closes (the page re-renders)
 */
export function createPhoneSignIn(shopper, onChange) {
  const section = document.querySelector("#sign-in");
  const phoneForm = section.querySelector("#phone-form");
  const codeForm = section.querySelector("#code-form");
  const phoneInput = section.querySelector("#phone");
  const codeInput = section.querySelector("#phone-code");
  const error = section.querySelector("#sign-in-error");
  const recaptcha = section.querySelector("#recaptcha");
  let confirmation = null;
  let waiting = null; // the signIn() promise and its resolve, while the form is open

  function setError(text) {
    if (error.textContent !== text) error.textContent = text;
    phoneInput.setAttribute("aria-invalid", String(Boolean(text) && codeForm.hidden));
    codeInput.setAttribute("aria-invalid", String(Boolean(text) && !codeForm.hidden));
  }

  const busy = (form, work) =>
    whileSending(form, work, { showError: setError, describe, what: "phone sign-in failed" });

  phoneForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const phoneNumber = phoneInput.value.replace(/[\s().-]/g, "");
    // E.164, checked here: the SDK can take seconds to refuse a malformed number.
    if (!/^\+[1-9]\d{6,14}$/.test(phoneNumber)) {
      setError(PHONE_MESSAGES["auth/invalid-phone-number"]);
      phoneInput.focus();
      return;
    }
    busy(phoneForm, async () => {
      confirmation = await shopper.sendPhoneCode(phoneNumber, recaptcha);
      codeForm.hidden = false;
      codeInput.value = "";
      codeInput.focus();
    });
  });

  codeForm.addEventListener("submit", (event) => {
    event.preventDefault();
    busy(codeForm, async () => {
      await confirmation.confirm(codeInput.value.trim());
      section.hidden = true;
      codeForm.hidden = true;
      const { resolve } = waiting;
      waiting = null;
      onChange();
      resolve();
    });
  });

  return {
    /** Whether the shopper is being asked to sign in right now. */
    get open() {
      return waiting !== null;
    },
    /** codedrop.js's signIn(): resolves once the shopper has signed in with their phone. */
    signIn() {
      if (waiting) return waiting.promise;
      let resolve;
      const promise = new Promise((done) => {
        resolve = done;
      });
      waiting = { promise, resolve };
      section.hidden = false;
      onChange();
      phoneInput.focus();
      return promise;
    },
  };
}
