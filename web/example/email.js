// Keeping the code on another device. An anonymous shopper links an email address to their
// account (email-link sign-in: Firebase mails a link, opening it proves the address); in another
// browser, signing in by a link to that address is the same account, so claims/me, and the page,
// show the same code. Locally the Auth emulator "sends" the mail: its REST API lists the links.

import {
  EmailAuthProvider,
  isSignInWithEmailLink,
  linkWithCredential,
  sendSignInLinkToEmail,
  signInWithEmailLink,
} from "https://www.gstatic.com/firebasejs/12.19.0/firebase-auth.js";

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
  "auth/too-many-requests": "Too many attempts: wait a moment, then try again.",
};

function pageAddress() {
  const url = new URL(location.href);
  for (const name of LINK_PARAMS) url.searchParams.delete(name);
  return url.toString();
}

/**
 * @param auth the page's Firebase Auth instance
 */
export function createEmailKeeper(auth) {
  const section = document.querySelector("#keep");
  const form = section.querySelector("#keep-form");
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
    if (user?.email && !user.isAnonymous) {
      form.hidden = true;
      say(title, "Your code is yours on any device");
      say(hint, "");
      say(status, `Saved to ${user.email}: sign in with it by email link on any device.`);
      return;
    }
    form.hidden = false;
    if (link) {
      say(title, "Confirm your email address");
      say(hint, "Enter the address the sign-in link was sent to.");
    } else if (holdsCode) {
      say(title, "Keep your code on any device");
      say(hint, "We email you a link: open it here to save your code to that address.");
    } else {
      say(title, "Got a code on another device?");
      say(hint, "We email you a link: open it here to see the code saved to that address.");
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
        if (failure?.code !== "auth/email-already-in-use" && failure?.code !== "auth/credential-already-in-use") {
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

  async function busy(work) {
    const button = form.querySelector("button");
    button.disabled = true;
    say(error, "");
    try {
      await work();
    } catch (failure) {
      console.warn("email link failed", failure);
      say(error, MESSAGES[failure?.code] ?? "That did not work. Please try again.");
    } finally {
      button.disabled = false;
    }
  }

  return {
    render,
    /** Before the sale starts: finish a sign-in link this page was opened with (the shopper's
     * address remembered from when the link was asked for). */
    async start() {
      await auth.authStateReady();
      const email = localStorage.getItem(EMAIL_KEY);
      if (link && email) await busy(() => complete(email));
    },
    /** `onSignedIn` runs once the shopper is signed in by a link whose address they typed. */
    listen(onSignedIn) {
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
