// Keeping the code on another device. An anonymous shopper links an email address (email-link
// sign-in: Firebase mails a link, opening it proves the address) or a phone number (a code by
// text message) to their account; in another browser, signing in with that address or number is
// the same account, so claims/me, and the page, show the same code. Locally the Auth emulator
// "sends" the mail and the texts: its REST API lists the links and codes.

import {
  EmailAuthProvider,
  isSignInWithEmailLink,
  linkWithCredential,
  linkWithPhoneNumber,
  RecaptchaVerifier,
  sendSignInLinkToEmail,
  signInWithEmailLink,
  signInWithPhoneNumber,
} from "https://www.gstatic.com/firebasejs/12.19.0/firebase-auth.js";
import { whileSending } from "./forms.js";
import { PHONE_MESSAGES } from "./phone.js";

// The address the link went to, so the browser that opens it need not ask again (Firebase
// wants the address with the link: a link forwarded to someone else signs nobody in).
const EMAIL_KEY = "codedrop:email-link-address";
// What Firebase adds to the page's address in a sign-in link.
const LINK_PARAMS = ["apiKey", "oobCode", "mode", "lang", "continueUrl", "tenantId"];

const MESSAGES = {
  "auth/invalid-email": "That email address does not look right.",
  "auth/missing-email": "Enter your email address.",
  "auth/invalid-action-code": "That link has been used or has expired: ask for a new one.",
  "auth/expired-action-code": "That link has expired: ask for a new one.",
  ...PHONE_MESSAGES,
  "auth/credential-already-in-use":
    "That number already keeps another code: sign in with it on a new page instead.",
  "auth/provider-already-linked": "Your code is already saved to a phone number.",
};

function pageAddress() {
  const url = new URL(location.href);
  for (const name of LINK_PARAMS) url.searchParams.delete(name);
  return url.toString();
}

/**
 * @param auth the page's Firebase Auth instance
 */
export function createKeeper(auth) {
  const section = document.querySelector("#keep");
  const form = section.querySelector("#keep-form");
  const phoneForm = section.querySelector("#keep-phone-form");
  const phoneInput = section.querySelector("#keep-phone");
  const codeForm = section.querySelector("#keep-phone-code-form");
  const codeInput = section.querySelector("#keep-phone-code");
  const recaptcha = section.querySelector("#keep-recaptcha");
  let verifier = null;
  let confirmation = null;
  const input = section.querySelector("#keep-email");
  const title = section.querySelector("#keep-title");
  const hint = section.querySelector("#keep-hint");
  const status = section.querySelector("#keep-status");
  const error = section.querySelector("#keep-error");
  let link = isSignInWithEmailLink(auth, location.href) ? location.href : null;

  const say = (element, text) => {
    if (element.textContent !== text) element.textContent = text;
  };

  /** Show what fits the shopper now: whether they hold a code, and how they are signed in
   * (`offered`: false hides the section, as on a sale that counts phone numbers). */
  function render(holdsCode, { offered = true } = {}) {
    if (!offered) {
      section.hidden = true;
      return;
    }
    const user = auth.currentUser;
    const saved = user && !user.isAnonymous ? (user.email ?? user.phoneNumber) : null;
    if (saved) {
      form.hidden = phoneForm.hidden = codeForm.hidden = true;
      say(title, "Your code is yours on any device");
      say(hint, "");
      say(status, `Saved to ${saved}: sign in with it on any device.`);
      return;
    }
    form.hidden = false;
    phoneForm.hidden = Boolean(link) || !codeForm.hidden;
    if (link) {
      say(title, "Confirm your email address");
      say(hint, "Enter the address the sign-in link was sent to.");
    } else if (holdsCode) {
      say(title, "Keep your code on any device");
      say(hint, "We email you a link (open it here) or text you a code, to save your code to it.");
    } else {
      say(title, "Got a code on another device?");
      say(hint, "Sign in with the email address or phone number you saved it to.");
    }
  }

  /** Link the anonymous account to the address (the code stays), or sign in as the account
   * the address already belongs to. */
  async function complete(email) {
    const user = auth.currentUser;
    if (user?.isAnonymous) {
      try {
        await linkWithCredential(user, EmailAuthProvider.credentialWithLink(email, link));
      } catch (failure) {
        if (
          failure?.code !== "auth/email-already-in-use" &&
          failure?.code !== "auth/credential-already-in-use"
        ) {
          throw failure;
        }
        // The address has an account of its own: the shopper becomes that account (and sees
        // its code); this browser's anonymous session is left behind.
        await signInWithEmailLink(auth, email, link);
      }
    } else {
      await signInWithEmailLink(auth, email, link);
    }
    link = null;
    localStorage.removeItem(EMAIL_KEY);
    history.replaceState(history.state, "", pageAddress());
  }

  const busy = (work, on = form) =>
    whileSending(on, work, {
      showError: (text) => say(error, text),
      describe: (failure) => MESSAGES[failure?.code] ?? "That did not work. Please try again.",
      what: "keeping the code failed",
    });

  return {
    render,
    /** Before the sale starts: finish a sign-in link this page was opened with (the shopper's
     * address remembered from when the link was asked for). */
    async start() {
      await auth.authStateReady();
      const email = localStorage.getItem(EMAIL_KEY);
      if (link && email) await busy(() => complete(email));
    },
    /** `onSignedIn` runs once the shopper has signed in here as the account that holds their
     * code (a link whose address they typed, or a phone number). */
    listen(onSignedIn) {
      phoneForm.addEventListener("submit", (event) => {
        event.preventDefault();
        busy(async () => {
          verifier?.clear();
          verifier = new RecaptchaVerifier(auth, recaptcha, { size: "invisible" });
          const user = auth.currentUser;
          const number = phoneInput.value.trim();
          confirmation = user?.isAnonymous
            ? await linkWithPhoneNumber(user, number, verifier)
            : await signInWithPhoneNumber(auth, number, verifier);
          codeForm.hidden = false;
          phoneForm.hidden = true;
          codeInput.value = "";
          codeInput.focus();
        }, phoneForm);
      });
      codeForm.addEventListener("submit", (event) => {
        event.preventDefault();
        busy(async () => {
          const wasAnonymous = Boolean(auth.currentUser?.isAnonymous);
          await confirmation.confirm(codeInput.value.trim());
          codeForm.hidden = true;
          // Linked: this page's shopper kept their code. Signed in: look theirs up.
          if (wasAnonymous) render(true);
          else await onSignedIn();
        }, codeForm);
      });
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const email = input.value.trim();
        busy(async () => {
          if (link) {
            await complete(email);
            await onSignedIn();
            return;
          }
          await sendSignInLinkToEmail(auth, email, { url: pageAddress(), handleCodeInApp: true });
          localStorage.setItem(EMAIL_KEY, email);
          say(status, `Check your inbox: we sent a link to ${email}.`);
        });
      });
    },
  };
}
