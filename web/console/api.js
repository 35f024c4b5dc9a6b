// admin_api from the console: the admin's ID token on every call, errors turned into sentences
// a marketer can act on, files uploaded straight to the bucket and downloads saved as files.

import { NoAnswer, uploadFile } from "./upload.js";

export class ApiError extends Error {
  /** @param {number} status @param {string} code @param {string} message @param {object} body */
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

// error_codes a marketer may meet, in their words (the API's own message is shown otherwise).
const EXPLAINED = {
  UNAUTHENTICATED: "Your sign-in has expired. Sign in again to carry on.",
  FORBIDDEN: "This account is not allowed to do that. Ask an admin of your team.",
  CAMPAIGN_EXISTS: "A campaign with this id already exists: choose another id.",
  CAMPAIGN_NOT_FOUND: "This campaign no longer exists.",
  CAMPAIGN_CHANGED:
    "Someone else changed this campaign while you were editing it. Your changes were not saved: " +
    "check what changed below, then save again.",
  JOB_NOT_FOUND: "This job no longer exists.",
  WEBHOOK_URL_NOT_ALLOWED: "That webhook address is not allowed: use a public https:// address.",
  TOO_MANY_WEBHOOKS: "This campaign has as many webhooks as it may have: delete one first.",
  CONTENDED: "codedrop is busy right now. Wait a moment and try again.",
  ADMIN_NOT_FOUND: "That person is no longer an admin.",
  CANNOT_REMOVE_YOURSELF: "You cannot remove yourself: ask another owner.",
};

// Firebase Auth's answers to renewing an ID token that mean the admin must sign in again.
const SESSION_ENDED = new Set([
  "auth/user-token-expired",
  "auth/invalid-user-token",
  "auth/user-disabled",
  "auth/user-not-found",
]);

/** A sentence for any error the console meets. */
export function explain(error) {
  if (error instanceof ApiError) {
    if (error.code === "REQUEST_VALIDATION_FAILED") {
      return `Check the form: ${error.message}`;
    }
    return EXPLAINED[error.code] ?? error.message;
  }
  if (error instanceof TypeError || error?.code === "auth/network-request-failed") {
    return "codedrop cannot be reached. Check your connection and try again.";
  }
  return error?.message || "Something went wrong. Try again.";
}

/**
 * @param {{base: string, auth: {idToken(force?: boolean): Promise<string | null>},
 *          onExpired: () => void}} options
 */
export function createApi({ base, auth, onExpired }) {
  /** fetch with the admin's token; a 401 is retried once with a fresh token, then the
   * sign-in counts as expired. */
  async function send(method, path, { body, headers = {} } = {}) {
    for (const force of [false, true]) {
      let token;
      try {
        token = await auth.idToken(force);
      } catch (error) {
        // The session cannot be renewed (revoked, expired, account disabled): sign in again.
        if (!SESSION_ENDED.has(error?.code)) throw error;
      }
      if (!token) break;
      const init = { method, headers: { ...headers, Authorization: `Bearer ${token}` } };
      if (body !== undefined) {
        init.headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body);
      }
      const response = await fetch(`${base}${path}`, init);
      if (response.status !== 401) return response;
    }
    onExpired();
    throw new ApiError(401, "UNAUTHENTICATED", EXPLAINED.UNAUTHENTICATED, {});
  }

  async function failure(response) {
    let body = {};
    try {
      body = await response.json();
    } catch {
      // not JSON: a proxy's or the platform's page
    }
    const code = body.error_code ?? `HTTP_${response.status}`;
    const message = body.error_message ?? `codedrop answered ${response.status}.`;
    return new ApiError(response.status, code, message, body);
  }

  return {
    /** The JSON answer of a call (null for 204); an ApiError otherwise. */
    async call(method, path, options = {}) {
      const response = await send(method, path, options);
      if (!response.ok) throw await failure(response);
      return response.status === 204 ? null : response.json();
    },

    /** The first `limit` records of a CSV a download route answers (with its header row first),
     * read as they arrive: the rest of a long file is never fetched. */
    async firstRecords(path, limit) {
      const response = await send("GET", path);
      if (!response.ok) throw await failure(response);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      let lines = 0;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
        lines += value.split("\n").length - 1;
        if (lines > limit) {
          await reader.cancel();
          break;
        }
      }
      return parseCsv(text).slice(0, limit + 1);
    },

    /** Save what a download route answers (a CSV) as a file named `name`. */
    async download(path, name) {
      const response = await send("GET", path);
      if (!response.ok) throw await failure(response);
      const blob = await response.blob();
      const url = URL.createObjectURL(blob);
      const link = document.createElement("a");
      link.href = url;
      link.download = name;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    },

    /** Send `file` to a resumable upload session in chunks (Cloud Storage answers the console's
     * origin, which admin_api named when it opened the session), taken up from what the session
     * holds when `resume`; `onProgress(fraction)` as bytes leave. Throws UploadInterrupted when
     * the connection stays down, UploadSessionGone when the session expired. */
    upload(url, file, onProgress, { resume = false } = {}) {
      return uploadFile({ url, file, onProgress, resume, put: putToSession });
    },
  };
}

/** One PUT to an upload session: `{status, range}` (the committed bytes of a 308), or NoAnswer
 * when the request got no answer at all. */
function putToSession(url, body, contentRange, onSent) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.setRequestHeader("Content-Range", contentRange);
    if (body) {
      xhr.setRequestHeader("Content-Type", "text/csv");
      xhr.upload.addEventListener("progress", (event) => onSent?.(event.loaded));
    }
    xhr.addEventListener("load", () =>
      resolve({ status: xhr.status, range: xhr.getResponseHeader("Range") }),
    );
    xhr.addEventListener("error", () => reject(new NoAnswer()));
    xhr.addEventListener("timeout", () => reject(new NoAnswer()));
    xhr.send(body);
  });
}

/** The complete records of CSV text (RFC 4180 quoting); a last record cut short is left out. */
export function parseCsv(text) {
  const records = [];
  let record = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c !== '"') field += c;
      else if (text[i + 1] === '"') {
        field += '"';
        i += 1;
      } else quoted = false;
    } else if (c === '"') quoted = true;
    else if (c === ",") {
      record.push(field);
      field = "";
    } else if (c === "\n") {
      record.push(field.replace(/\r$/, ""));
      records.push(record);
      record = [];
      field = "";
    } else field += c;
  }
  return records;
}
