// Admins sign in to the console with Firebase Auth (email and password); admin_api checks the
// `admin` custom claim of the ID token on every call.

import { initializeApp } from "https://www.gstatic.com/firebasejs/12.19.0/firebase-app.js";
import {
  connectAuthEmulator,
  getAuth,
  onAuthStateChanged,
  signInWithEmailAndPassword,
  signOut,
} from "https://www.gstatic.com/firebasejs/12.19.0/firebase-auth.js";

// Firebase's error codes, in a marketer's words.
const SIGN_IN_ERRORS = {
  "auth/invalid-credential": "That email and password do not match an account.",
  // Projects without email enumeration protection (and the Auth emulator) say which was wrong.
  "auth/user-not-found": "That email and password do not match an account.",
  "auth/wrong-password": "That email and password do not match an account.",
  "auth/invalid-email": "That does not look like an email address.",
  "auth/user-disabled": "This account has been disabled. Ask an admin of your team.",
  "auth/too-many-requests": "Too many attempts. Wait a minute and try again.",
  "auth/network-request-failed": "The sign-in service cannot be reached. Check your connection.",
};

/** @param {{firebase: object, authEmulatorUrl?: string | null}} config */
export function createAdminAuth(config) {
  const app = initializeApp(config.firebase);
  const auth = getAuth(app);
  if (config.authEmulatorUrl) {
    connectAuthEmulator(auth, config.authEmulatorUrl, { disableWarnings: true });
  }
  return {
    /** Calls `listener(user | null)` now and on every sign-in or sign-out. */
    onChange(listener) {
      return onAuthStateChanged(auth, listener);
    },
    async signIn(email, password) {
      try {
        await signInWithEmailAndPassword(auth, email, password);
      } catch (error) {
        throw new Error(SIGN_IN_ERRORS[error.code] ?? "Signing in failed. Try again.");
      }
    },
    signOut() {
      return signOut(auth);
    },
    /** The signed-in admin's ID token (refreshed by the SDK before it expires), or null. */
    async idToken(forceRefresh = false) {
      await auth.authStateReady();
      const user = auth.currentUser;
      return user ? user.getIdToken(forceRefresh) : null;
    },
    /** The console roles the ID token carries: `admin` (admin_api requires it) and `owner`
     * (may invite and remove admins). */
    async roles() {
      const user = auth.currentUser;
      if (!user) return { admin: false, owner: false };
      const { claims } = await user.getIdTokenResult();
      return { admin: claims.admin === true, owner: claims.owner === true };
    },
  };
}
