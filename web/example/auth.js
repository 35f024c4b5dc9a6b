// Signing shoppers in with Firebase Auth, and App Check tokens, as the page will in production.
// codedrop.js only needs getIdToken(), signIn() and, for campaigns with require_app_check,
// getAppCheckToken(); this is where a page chooses how shoppers sign in.

import { initializeApp } from "https://www.gstatic.com/firebasejs/12.19.0/firebase-app.js";
import {
  connectAuthEmulator,
  getAuth,
  RecaptchaVerifier,
  signInAnonymously,
  signInWithPhoneNumber,
} from "https://www.gstatic.com/firebasejs/12.19.0/firebase-auth.js";
import {
  CustomProvider,
  getToken,
  initializeAppCheck,
  ReCaptchaEnterpriseProvider,
} from "https://www.gstatic.com/firebasejs/12.19.0/firebase-app-check.js";

/**
 * @param {{firebase: object, authEmulatorUrl?: string | null, signInMethod?: string,
 *          appCheckTokenUrl?: string | null, appCheckSiteKey?: string | null}} config
 *   firebase: the web app's Firebase config (apiKey, authDomain, projectId);
 *   authEmulatorUrl: the Auth emulator (local stack only);
 *   signInMethod: "anonymous" (the default) for campaigns that accept anonymous shoppers;
 *   appCheckTokenUrl: the local stack's development App Check tokens (local only);
 *   appCheckSiteKey: the reCAPTCHA Enterprise site key App Check uses in production.
 */
export function createShopperAuth(config) {
  const app = initializeApp(config.firebase);
  const auth = getAuth(app);
  if (config.authEmulatorUrl) {
    connectAuthEmulator(auth, config.authEmulatorUrl, { disableWarnings: true });
    // The emulator sends no SMS and needs no reCAPTCHA: the SDK then uses a stand-in verifier
    // that never leaves the page.
    auth.settings.appVerificationDisabledForTesting = true;
  }
  let verifier = null;

  return {
    auth,
    /** The signed-in shopper's ID token, or null. Waits for Firebase to restore a session
     * saved by an earlier visit, so a reload finds the shopper (and their code) again. A
     * session that cannot claim here (anonymous where the sale counts phone numbers) is null,
     * so the shopper is asked to sign in again. */
    async getIdToken(forceRefresh = false, { phone = false } = {}) {
      await auth.authStateReady();
      const user = auth.currentUser;
      if (!user || (phone && !user.phoneNumber)) return null;
      return user.getIdToken(forceRefresh);
    },
    /** Sign in without asking anything (campaigns that accept anonymous shoppers). */
    async signIn() {
      const method = config.signInMethod ?? "anonymous";
      if (method === "anonymous") {
        await signInAnonymously(auth);
        return;
      }
      throw new Error(`sign-in method ${method} is not available on this page`);
    },
    /** Text a code to `phoneNumber` (E.164); `container` holds the invisible reCAPTCHA.
     * Resolves with the confirmation whose confirm(code) signs the shopper in. */
    async sendPhoneCode(phoneNumber, container) {
      verifier?.clear();
      verifier = new RecaptchaVerifier(auth, container, { size: "invisible" });
      return signInWithPhoneNumber(auth, phoneNumber, verifier);
    },
    getAppCheckToken: appCheckTokens(app, config),
  };
}

/** getAppCheckToken() for codedrop.js, or undefined when the page has no App Check provider. */
function appCheckTokens(app, config) {
  let provider;
  if (config.appCheckTokenUrl) {
    // Locally: tokens signed by the local stack's development key set.
    provider = new CustomProvider({
      async getToken() {
        const response = await fetch(config.appCheckTokenUrl, { cache: "no-store" });
        if (!response.ok) throw new Error(`App Check tokens answered ${response.status}`);
        const { token, expireTimeMillis } = await response.json();
        return { token, expireTimeMillis };
      },
    });
  } else if (config.appCheckSiteKey) {
    provider = new ReCaptchaEnterpriseProvider(config.appCheckSiteKey);
  } else {
    return undefined;
  }
  const appCheck = initializeAppCheck(app, { provider, isTokenAutoRefreshEnabled: false });
  return async () => {
    try {
      return (await getToken(appCheck)).token;
    } catch (error) {
      // Without a token a sale that requires App Check answers APP_CHECK_REQUIRED, which the
      // page shows; a sale that does not require it claims anyway.
      console.warn("App Check token unavailable", error);
      return null;
    }
  };
}
