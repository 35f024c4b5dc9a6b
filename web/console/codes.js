// Codes: a CSV uploaded from the browser straight into the bucket (a resumable upload session
// admin_api opens; the file never passes through a function), codes generated, and every job of
// the campaign followed until it is done, with its rejected rows.

import { explain } from "./api.js";
import { announce, field, fmt, formError, h, onSubmit, section } from "./dom.js";
import { campaignJobs, jobDownload } from "./exports.js";
import { UploadInterrupted, UploadSessionGone } from "./upload.js";

// While a job runs (or an uploaded file waits for its import), the jobs are read this often.
const FOLLOW_MS = 1000;
const STATE_WORDS = { running: "Working…", done: "Done", failed: "Failed" };
const KIND_WORDS = { import: "Import", generate: "Generated codes", assignment: "Assignment" };
// Rows of an import's report shown in the console; the download has them all.
const REPORT_ROWS_SHOWN = 200;

export function renderCodes(ctx, slot, campaign) {
  const path = `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}`;
  const waitingFor = new Set(); // objects uploaded whose import job is not listed yet
  const reports = new Map(); // job id -> its report's first rows (a promise), read once
  let timer = null;
  let stopped = false;

  // --- upload ---
  const input = h("input", {
    type: "file",
    accept: ".csv,text/csv",
    dataset: { testid: "upload-input" },
  });
  const progress = h("progress", {
    max: "100",
    value: "0",
    dataset: { testid: "upload-progress" },
    hidden: true,
  });
  const progressText = h("span", { class: "hint", "aria-live": "polite" });
  const uploadError = formError();
  const resumeButton = h(
    "button",
    {
      type: "button",
      class: "button button-secondary",
      dataset: { testid: "upload-resume" },
      hidden: true,
    },
    "Resume the upload",
  );
  let interrupted = null; // the file whose upload stopped, resumed by the button

  /** Upload `file` through its session: the one this browser opened for the same file (same
   * name, size and date), taken up where Cloud Storage stopped, or a new one. */
  async function send(file) {
    uploadError.textContent = "";
    resumeButton.hidden = true;
    interrupted = null;
    input.disabled = true;
    progress.hidden = false;
    const key = sessionKey(campaign.campaign_id, file);
    let session = savedSession(key);
    const resume = session !== null;
    progressText.textContent = resume
      ? `Resuming the upload of ${file.name}…`
      : `Uploading ${file.name}…`;
    const onProgress = (fraction) => {
      progress.value = Math.round(fraction * 100);
      progress.setAttribute("aria-valuetext", `${Math.round(fraction * 100)}% uploaded`);
    };
    try {
      try {
        if (!resume) {
          session = await ctx.api.call("POST", `${path}/uploads`, { body: { name: file.name } });
          saveSession(key, session);
        } else {
          announce(`Resuming the upload of ${file.name}.`);
        }
        await ctx.api.upload(session.upload_url, file, onProgress, { resume });
      } catch (failure) {
        if (!(failure instanceof UploadSessionGone)) throw failure;
        // The session expired (a week) or was cancelled: the file goes again from the start.
        forgetSession(key);
        session = await ctx.api.call("POST", `${path}/uploads`, { body: { name: file.name } });
        saveSession(key, session);
        await ctx.api.upload(session.upload_url, file, onProgress);
      }
      forgetSession(key);
      progressText.textContent = `${file.name} uploaded. Importing its codes…`;
      announce(`${file.name} uploaded. Importing its codes.`);
      waitingFor.add(session.object);
      refresh();
    } catch (failure) {
      if (failure instanceof UploadInterrupted) {
        interrupted = file;
        const done = Math.floor((100 * failure.sent) / Math.max(failure.total, 1));
        progressText.textContent = "";
        uploadError.textContent =
          `The upload of ${file.name} stopped at ${done}%: your connection dropped. ` +
          "Resume it to send the rest (choosing the same file again later resumes it too).";
        resumeButton.hidden = false;
      } else {
        progressText.textContent = "";
        progress.hidden = true;
        uploadError.textContent = explain(failure);
      }
    } finally {
      input.disabled = false;
      input.value = "";
    }
  }
  input.addEventListener("change", () => {
    const file = input.files?.[0];
    if (file) send(file);
  });
  resumeButton.addEventListener("click", () => {
    if (interrupted) send(interrupted);
  });

  // --- generate ---
  const count = h("input", {
    type: "number",
    min: "1",
    max: "1000000",
    value: "1000",
    required: true,
  });
  const length = h("input", { type: "number", min: "6", max: "32", value: "10", required: true });
  const prefix = h("input", {
    type: "text",
    pattern: "[A-Z0-9-]{0,16}",
    maxlength: "16",
    value: "",
    autocomplete: "off",
  });
  const generateError = formError();
  const generate = h(
    "form",
    { class: "form", novalidate: true, "aria-label": "Generate codes" },
    h(
      "div",
      { class: "row" },
      field("How many codes", count),
      field("Characters per code", length),
      field("Prefix (optional)", prefix, "Capital letters, digits and dashes, e.g. SPRING-"),
    ),
    generateError,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "button button-secondary" }, "Generate codes"),
    ),
  );
  onSubmit(generate, generateError, explain, async () => {
    const body = { count: Number(count.value), length: Number(length.value) };
    if (prefix.value) body.prefix = prefix.value.toUpperCase();
    await ctx.api.call("POST", `${path}/codes:generate`, { body });
    announce("Generating codes.");
    refresh();
  });

  const jobs = h("div", { class: "jobs", "aria-live": "off" });
  slot.append(
    section(
      { id: "upload", title: "Upload codes" },
      h(
        "p",
        { class: "hint" },
        "A CSV file with one code per line (a header line “code” is allowed). Rows that are empty, " +
          "too long, repeated or already in this campaign are not imported: they are listed below " +
          "with their line number.",
      ),
      field("CSV file", input),
      h("div", { class: "progress-row" }, progress, progressText),
      uploadError,
      resumeButton,
    ),
    section({ id: "generate", title: "Generate codes" }, generate),
    section({ id: "jobs", title: "Imports and generations", card: false }, jobs),
  );

  async function refresh() {
    clearTimeout(timer);
    if (stopped) return;
    const listed = await campaignJobs(ctx, path, (job) => job.kind !== "export");
    if (stopped || !listed) return;
    for (const job of listed) {
      for (const object of waitingFor)
        if (job.source?.includes(`/${object}`)) waitingFor.delete(object);
    }
    // Redrawn every second while a job runs: keep the keyboard's place on a job's button.
    const focused = document.activeElement?.closest?.("[data-job-id]")
      ? document.activeElement
      : null;
    const place = focused && [
      focused.closest("[data-job-id]").dataset.jobId,
      focused.dataset.testid,
    ];
    jobs.replaceChildren(
      ...(listed.length
        ? listed.map((job) => jobCard(ctx, job, reports))
        : [h("p", { class: "hint" }, "No codes loaded yet.")]),
    );
    if (place)
      jobs.querySelector(`[data-job-id="${place[0]}"] [data-testid="${place[1]}"]`)?.focus();
    if (waitingFor.size || listed.some((job) => job.state === "running")) {
      timer = setTimeout(refresh, FOLLOW_MS);
    } else if (progressText.textContent.endsWith("Importing its codes…")) {
      progressText.textContent = "Import finished.";
      announce("Import finished.");
    }
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// Upload sessions this browser opened and has not finished, by file: choosing the same file
// again (after a reload, or the next day: a session lasts a week) resumes it. The URL lets its
// holder write that one object only.
const SESSIONS = "codedrop.uploads";

function sessionKey(campaignId, file) {
  return [campaignId, file.name, file.size, file.lastModified].join("/");
}

function sessions() {
  try {
    return JSON.parse(localStorage.getItem(SESSIONS) ?? "{}");
  } catch {
    return {};
  }
}

function savedSession(key) {
  return sessions()[key] ?? null;
}

function saveSession(key, session) {
  const all = sessions();
  all[key] = { upload_url: session.upload_url, object: session.object };
  localStorage.setItem(SESSIONS, JSON.stringify(all));
}

function forgetSession(key) {
  const all = sessions();
  delete all[key];
  localStorage.setItem(SESSIONS, JSON.stringify(all));
}

function rows(listed) {
  return listed.map((row) =>
    h(
      "tr",
      { dataset: { line: String(row.line) } },
      h("td", { class: "num" }, String(row.line)),
      h("td", {}, row.reason),
      h("td", { class: "mono" }, row.value ?? ""),
    ),
  );
}

function objectName(source) {
  if (!source) return null;
  const object = source.replace(/^gs:\/\/[^/]+\//, "").replace(/#.*$/, "");
  return object.split("/").pop();
}

/** One job: what it is, its state and counts, and the rows it turned away (from its report,
 * which lists duplicates and warnings too, once the job is done). */
function jobCard(ctx, job, reports) {
  const rejected = job.invalid + job.duplicates;
  const title =
    job.kind === "import"
      ? `Import of ${objectName(job.source) ?? "a file"}`
      : (KIND_WORDS[job.kind] ?? job.kind);
  const counts = [
    ["Rows read", job.rows_read],
    [
      job.kind === "assignment" ? "Assigned" : "Imported",
      job.kind === "assignment" ? job.assigned : job.imported,
    ],
    ["Repeated", job.duplicates],
    ["Invalid", job.invalid],
  ];
  const card = h(
    "article",
    {
      class: `job job-${job.state}`,
      dataset: { testid: "job", jobId: job.job_id, kind: job.kind },
    },
    h("h3", {}, title),
    h(
      "p",
      { class: "hint" },
      `Started ${fmt.exactTime(job.created_at)} · `,
      h(
        "span",
        { dataset: { testid: "job-state", state: job.state }, class: `state state-${job.state}` },
        STATE_WORDS[job.state] ?? job.state,
      ),
    ),
    h(
      "dl",
      { class: "counts" },
      counts.flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, fmt.count(value))]),
    ),
  );
  if (job.failure_reason) {
    card.append(
      h("p", { class: "form-error" }, `This file could not be imported: ${job.failure_reason}`),
    );
  }
  if (job.warnings > 0) {
    card.append(
      h(
        "p",
        { class: "warning" },
        `${fmt.count(job.warnings)} ${job.warnings === 1 ? "code was" : "codes were"} imported with a warning: ` +
          "they start with =, +, - or @, which a spreadsheet would run as a formula (exports make them safe). " +
          "The report lists them.",
      ),
    );
  }
  if (rejected > 0 || job.warnings > 0) {
    const body = h("tbody", {}, rows(job.errors ?? []));
    const note = h("p", { class: "hint" });
    const total = rejected + job.warnings;
    const shown = (count) => {
      note.textContent =
        count < total
          ? `The first ${fmt.count(count)} are listed here; the download has all of them.`
          : "";
    };
    shown((job.errors ?? []).length);
    if (rejected > 0)
      card.append(
        h(
          "h4",
          {},
          `${fmt.count(rejected)} ${rejected === 1 ? "row was" : "rows were"} not imported`,
        ),
      );
    card.append(
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "table compact", dataset: { testid: "job-rejected" } },
          h(
            "caption",
            { class: "sr-only" },
            "Rows not imported, and codes imported with a warning",
          ),
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col", class: "num" }, "Line"),
              h("th", { scope: "col" }, "Reason"),
              h("th", { scope: "col" }, "Value"),
            ),
          ),
          body,
        ),
      ),
      note,
    );
    if (job.report && job.state !== "running") {
      if (!reports.has(job.job_id)) {
        reports.set(
          job.job_id,
          ctx.api.firstRecords(
            `/v1/jobs/${encodeURIComponent(job.job_id)}/download`,
            REPORT_ROWS_SHOWN,
          ),
        );
      }
      reports.get(job.job_id).then(
        (records) => {
          const [header = [], ...found] = records;
          const at = (name) => header.indexOf(name);
          const listed = found.map((r) => ({
            line: Number(r[at("line")]),
            reason: r[at("reason")],
            value: r[at("value")],
          }));
          // Repeats are reported as the import commits them, after later invalid rows: by line.
          body.replaceChildren(...rows(listed.sort((a, b) => a.line - b.line)));
          shown(found.length);
        },
        () => {},
      ); // the rows the job kept stay listed
    }
  }
  if ((rejected > 0 || job.warnings > 0) && job.state !== "running") {
    const label = rejected > 0 ? "Download the rejected rows (CSV)" : "Download the report (CSV)";
    card.append(jobDownload(ctx, job, "download-rejected", label, `report-${job.job_id}.csv`));
  }
  return card;
}
