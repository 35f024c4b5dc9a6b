// Signing shoppers in with Firebase Auth, as the page will in production. codedrop.js only
// needs getIdToken() and signIn(); this is where a page chooses how shoppers sign in.

import { initializeApp } from "https://www.gstatic.com/firebasejs/12.19.0/firebase-app.js";
import {
  connectAuthEmulator,
  getAuth,
  signInAnonymously,
} from "https://www.gstatic.com/firebasejs/12.19.0/firebase-auth.js";

/**
 * @param {{firebase: object, authEmulatorUrl?: string | null, signInMethod?: string}} config
 *   firebase: the web app's Firebase config (apiKey, authDomain, projectId);
 *   authEmulatorUrl: the Auth emulator (local stack only);
 *   signInMethod: "anonymous" (the default). Phone sign-in plugs in here.
 */
export function createShopperAuth(config) {
  const app = initializeApp(config.firebase);
  const auth = getAuth(app);
  if (config.authEmulatorUrl) {
    connectAuthEmulator(auth, config.authEmulatorUrl, { disableWarnings: true });
  }
  const method = config.signInMethod ?? "anonymous";

  return {
    auth,
    /** The signed-in shopper's ID token, or null. Waits for Firebase to restore a session
     * saved by an earlier visit, so a reload finds the shopper (and their code) again. */
    async getIdToken(forceRefresh = false) {
      await auth.authStateReady();
      return auth.currentUser ? auth.currentUser.getIdToken(forceRefresh) : null;
    },
    /** Called by codedrop.js when a shopper who is not signed in claims. */
    async signIn() {
      if (method === "anonymous") {
        await signInAnonymously(auth);
        return;
      }
      throw new Error(`sign-in method ${method} is not available on this page`);
    },
  };
}
