// The console's upload to a Cloud Storage resumable session: chunks, and an interrupted upload
// taken up from the bytes the session committed, against a fake session that answers as Cloud
// Storage documents (308 with `Range: bytes=0-N`, no Range before the first byte).

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  CHUNK_BYTES,
  NoAnswer,
  RETRY_MS,
  UploadInterrupted,
  UploadSessionGone,
  committedBytes,
  uploadFile,
} from "../console/upload.js";

/** A session holding what it was sent; `drop(n)` makes the n-th PUT (from 1) go unanswered. */
function session({ drop = () => false, gone = false } = {}) {
  const state = { held: new Uint8Array(0), puts: [], done: false };
  state.put = async (url, body, contentRange) => {
    state.puts.push(contentRange);
    if (drop(state.puts.length)) throw new NoAnswer();
    if (gone) return { status: 404, range: null };
    const status = /^bytes \*\/(\d+)$/.exec(contentRange);
    if (status) {
      if (state.held.length === Number(status[1])) return { status: 200, range: null };
      return { status: 308, range: state.held.length ? `bytes=0-${state.held.length - 1}` : null };
    }
    const [, start, end, total] = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(contentRange).map(Number);
    assert.equal(start, state.held.length, "a chunk starts where the session's bytes end");
    const bytes = new Uint8Array(await body.arrayBuffer());
    assert.equal(bytes.length, end - start + 1);
    const held = new Uint8Array(state.held.length + bytes.length);
    held.set(state.held);
    held.set(bytes, state.held.length);
    state.held = held;
    if (held.length === total) {
      state.done = true;
      return { status: 201, range: null };
    }
    return { status: 308, range: `bytes=0-${held.length - 1}` };
  };
  return state;
}

function file(size) {
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = i % 251;
  return new Blob([bytes]);
}

const noWait = async () => {};

/** uploadFile with what these tests share: session URL "u", no progress shown, no waiting. */
function upload(sent, put, options = {}) {
  return uploadFile({ url: "u", file: sent, put, onProgress: () => {}, wait: noWait, ...options });
}

describe("committedBytes", () => {
  it("reads a 308's Range, and none as nothing persisted", () => {
    assert.equal(committedBytes("bytes=0-1048575"), 1048576);
    assert.equal(committedBytes(null), 0);
    assert.equal(committedBytes(""), 0);
  });
});

describe("uploadFile", () => {
  it("sends a file in chunks of whole 256 KiB units, and the last one short", async () => {
    const fake = session();
    const sent = file(2 * CHUNK_BYTES + 10);
    const progress = [];
    await upload(sent, fake.put, { onProgress: (f) => progress.push(f) });
    assert.equal(CHUNK_BYTES % (256 * 1024), 0);
    assert.deepEqual(fake.puts, [
      `bytes 0-${CHUNK_BYTES - 1}/${sent.size}`,
      `bytes ${CHUNK_BYTES}-${2 * CHUNK_BYTES - 1}/${sent.size}`,
      `bytes ${2 * CHUNK_BYTES}-${sent.size - 1}/${sent.size}`,
    ]);
    assert.deepEqual(fake.held, new Uint8Array(await sent.arrayBuffer()));
    assert.equal(progress.at(-1), 1);
  });

  it("after a chunk got no answer, asks the session what it holds and goes on from there", async () => {
    const fake = session({ drop: (n) => n === 2 });
    const sent = file(3 * CHUNK_BYTES);
    const waits = [];
    await upload(sent, fake.put, { wait: async (ms) => waits.push(ms) });
    assert.deepEqual(fake.puts, [
      `bytes 0-${CHUNK_BYTES - 1}/${sent.size}`,
      `bytes ${CHUNK_BYTES}-${2 * CHUNK_BYTES - 1}/${sent.size}`, // lost
      `bytes */${sent.size}`,
      `bytes ${CHUNK_BYTES}-${2 * CHUNK_BYTES - 1}/${sent.size}`,
      `bytes ${2 * CHUNK_BYTES}-${3 * CHUNK_BYTES - 1}/${sent.size}`,
    ]);
    assert.deepEqual(waits, [RETRY_MS[0]]);
    assert.ok(fake.done);
  });

  it("stops with what was committed when the connection stays down, and resumes from it", async () => {
    let offline = false;
    const fake = session({ drop: () => offline });
    const sent = file(2 * CHUNK_BYTES + 5);
    const put = async (...args) => {
      const answer = await fake.put(...args);
      offline = true; // the connection drops after the first chunk
      return answer;
    };
    const stopped = await upload(sent, put).catch((e) => e);
    assert.ok(stopped instanceof UploadInterrupted);
    assert.equal(stopped.sent, CHUNK_BYTES);
    assert.equal(stopped.total, sent.size);

    offline = false;
    const before = fake.puts.length;
    await upload(sent, fake.put, { resume: true });
    assert.deepEqual(fake.puts.slice(before), [
      `bytes */${sent.size}`,
      `bytes ${CHUNK_BYTES}-${2 * CHUNK_BYTES - 1}/${sent.size}`,
      `bytes ${2 * CHUNK_BYTES}-${sent.size - 1}/${sent.size}`,
    ]);
    assert.deepEqual(fake.held, new Uint8Array(await sent.arrayBuffer()));
  });

  it("resumes from the first byte when nothing was persisted (a 308 without Range)", async () => {
    const fake = session();
    const sent = file(10);
    await upload(sent, fake.put, { resume: true });
    assert.deepEqual(fake.puts, [`bytes */10`, `bytes 0-9/10`]);
  });

  it("resuming an upload that had finished sends nothing more", async () => {
    const fake = session();
    const sent = file(10);
    await upload(sent, fake.put);
    await upload(sent, fake.put, { resume: true });
    assert.deepEqual(fake.puts, [`bytes 0-9/10`, `bytes */10`]);
  });

  it("an expired session is said as such, for a new one to be opened", async () => {
    const fake = session({ gone: true });
    await assert.rejects(upload(file(10), fake.put, { resume: true }), UploadSessionGone);
  });

  it("an empty file is finished by asking the session", async () => {
    const fake = session();
    await upload(file(0), fake.put);
    assert.deepEqual(fake.puts, [`bytes */0`]);
  });
});
