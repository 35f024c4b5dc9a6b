// A file sent straight to a Cloud Storage resumable upload session, a chunk at a time, and taken
// up after an interruption from what Cloud Storage committed (never from the start):
// https://cloud.google.com/storage/docs/performing-resumable-uploads

// Bytes per PUT: Cloud Storage takes chunks in multiples of 256 KiB (all but the last). A
// connection cut mid-chunk costs at most this much again; a 15 MB file is 15 requests.
export const CHUNK_BYTES = 1024 * 1024;
// Waits before asking the session how far it got and carrying on, when a chunk did not arrive;
// then the upload stops and the marketer may resume it (now, or after a reload).
export const RETRY_MS = [1000, 2000, 4000];
// Answers after which sending again may succeed (Cloud Storage's documented retry cases).
const TRANSIENT = new Set([408, 429, 500, 502, 503, 504]);

/** The upload stopped (the connection dropped, or the bucket kept failing) with `sent` of
 * `total` bytes committed by Cloud Storage: resume it with the same session. */
export class UploadInterrupted extends Error {
  constructor(sent, total) {
    super("The upload stopped: your connection dropped. Resume it to send the rest of the file.");
    this.sent = sent;
    this.total = total;
  }
}

/** The session no longer exists (it expired after a week, or was cancelled): start a new one. */
export class UploadSessionGone extends Error {}

/** The request never got an answer (offline, connection reset). */
export class NoAnswer extends Error {}

/** How many bytes a 308's `Range` header says Cloud Storage committed: "bytes=0-N" is N + 1;
 * none at all is 0 (nothing persisted yet). */
export function committedBytes(range) {
  const match = /^bytes=0-(\d+)$/.exec((range ?? "").trim());
  return match ? Number(match[1]) + 1 : 0;
}

const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Send `file` (a Blob) to the session at `url`; resolves once Cloud Storage has the whole object.
 * With `resume`, first asks the session what it holds (`Content-Range: bytes * /TOTAL`) and sends
 * only the rest.
 * @param {{url: string, file: Blob, resume?: boolean, onProgress: (fraction: number) => void,
 *   put: (url: string, body: Blob | null, contentRange: string, onSent?: (n: number) => void)
 *     => Promise<{status: number, range: string | null}>, wait?: (ms: number) => Promise<void>}} options
 */
export async function uploadFile({ url, file, put, onProgress, resume = false, wait = delay }) {
  const total = file.size;
  // What the session holds: null once the object is complete.
  const ask = async () => {
    const answer = await put(url, null, `bytes */${total}`);
    if (answer.status === 200 || answer.status === 201) return null;
    if (answer.status === 308) return committedBytes(answer.range);
    if (TRANSIENT.has(answer.status)) throw new NoAnswer();
    throw trouble(answer.status);
  };
  let offset = 0;
  let failures = 0;
  // Ask the session before sending: a resumed upload, or a chunk that got no answer (it may
  // have arrived in part, or whole).
  // An empty file is finished by that question alone (`bytes */0`).
  let lost = resume || total === 0;
  for (;;) {
    let answer;
    try {
      if (lost) offset = await ask();
      lost = false;
      if (offset === null) break;
      const start = offset;
      const end = Math.min(start + CHUNK_BYTES, total);
      onProgress(total ? start / total : 0);
      answer = await put(
        url,
        file.slice(start, end),
        `bytes ${start}-${end - 1}/${total}`,
        (sent) => onProgress((start + sent) / total),
      );
      if (TRANSIENT.has(answer.status)) throw new NoAnswer();
    } catch (error) {
      if (!(error instanceof NoAnswer)) throw error;
      if (failures >= RETRY_MS.length) throw new UploadInterrupted(offset ?? total, total);
      await wait(RETRY_MS[failures++]);
      lost = true;
      continue;
    }
    if (answer.status === 200 || answer.status === 201) break;
    if (answer.status !== 308) throw trouble(answer.status);
    failures = 0;
    offset = committedBytes(answer.range);
  }
  onProgress(1);
}

function trouble(status) {
  if (status === 404 || status === 410) return new UploadSessionGone("The upload session expired.");
  return new Error(`The file could not be stored (the bucket answered ${status}). Try again.`);
}
