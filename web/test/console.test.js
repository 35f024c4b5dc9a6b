// The console's pure helpers: CSV records read from a download, durations and times in words.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { parseCsv } from "../console/api.js";
import { fmt, fromLocalInput, toLocalInput } from "../console/dom.js";

describe("parseCsv", () => {
  it("reads quoted fields with commas, quotes and CRLF line ends", () => {
    const text = 'line,reason,value\r\n5,"whitespace, inside",BAD CODE\r\n9,"says ""hi""",\'=1\r\n';
    assert.deepEqual(parseCsv(text), [
      ["line", "reason", "value"],
      ["5", "whitespace, inside", "BAD CODE"],
      ["9", 'says "hi"', "'=1"],
    ]);
  });

  it("leaves out a last record cut short (the read stopped there)", () => {
    assert.deepEqual(parseCsv("line,reason\n5,empty code\n6,empt"), [
      ["line", "reason"],
      ["5", "empty code"],
    ]);
  });
});

describe("fmt", () => {
  it("says durations in words", () => {
    assert.equal(fmt.duration(42.4), "42 s");
    assert.equal(fmt.duration(250), "4 min 10 s");
    assert.equal(fmt.duration(7500), "2 h 5 min");
    assert.equal(fmt.duration(null), "–");
  });

  it("counts with separators, and unknown counts as a dash", () => {
    assert.equal(fmt.count(12480), "12,480");
    assert.equal(fmt.count(undefined), "–");
  });

  it("round-trips a datetime-local value through UTC", () => {
    const iso = "2026-11-27T22:30:00.000Z";
    assert.equal(fromLocalInput(toLocalInput(iso)), iso);
  });
});
