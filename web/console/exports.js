// Exports: a campaign's claims, redemptions or codes as a CSV written by an export job
// (admin_api streams it back from the bucket), followed until it is ready, then downloaded.

import { explain } from "./api.js";
import { announce, field, fmt, formError, h, onSubmit, section } from "./dom.js";

const FOLLOW_MS = 1000;
const KINDS = {
  claims: "Claims (who got which code)",
  redemptions: "Redemptions (codes used at checkout)",
  codes: "Codes (every code and its state)",
};

export function renderExports(ctx, slot, campaign) {
  const path = `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}`;
  const kind = h(
    "select",
    { name: "kind" },
    Object.entries(KINDS).map(([value, label]) => h("option", { value }, label)),
  );
  const error = formError();
  const list = h("div", { class: "jobs" });
  const form = h(
    "form",
    { class: "form", novalidate: true, "aria-label": "New export" },
    field("What to export", kind),
    error,
    h(
      "div",
      { class: "actions" },
      h(
        "button",
        { type: "submit", class: "button button-primary", dataset: { testid: "export" } },
        "Export as CSV",
      ),
    ),
  );
  slot.append(
    section(
      { id: "export", title: "Export" },
      h(
        "p",
        { class: "hint" },
        "Exports are written in the background, a million rows included; the file is ready to download here. Cells that a spreadsheet would run as a formula are made safe.",
      ),
      form,
    ),
    section({ id: "exports", title: "Exports", card: false }, list),
  );

  let timer = null;
  let stopped = false;
  onSubmit(form, error, explain, async () => {
    await ctx.api.call("POST", `${path}/exports`, { body: { kind: kind.value } });
    announce("Export started.");
    refresh();
  });

  async function refresh() {
    clearTimeout(timer);
    if (stopped) return;
    const jobs = await campaignJobs(ctx, path, (job) => job.kind === "export");
    if (stopped || !jobs) return;
    list.replaceChildren(
      ...(jobs.length
        ? jobs.map((job) => exportCard(ctx, job))
        : [h("p", { class: "hint" }, "No exports yet.")]),
    );
    if (jobs.some((job) => job.state === "running")) timer = setTimeout(refresh, FOLLOW_MS);
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function exportCard(ctx, job) {
  const what = job.export_kind ?? "export";
  const card = h(
    "article",
    { class: `job job-${job.state}`, dataset: { testid: "export-job", jobId: job.job_id } },
    h("h3", {}, `Export of ${KINDS[what]?.split(" (")[0].toLowerCase() ?? what}`),
    h(
      "p",
      { class: "hint" },
      `Started ${fmt.exactTime(job.created_at)} · `,
      h(
        "span",
        { dataset: { testid: "job-state", state: job.state }, class: `state state-${job.state}` },
        { running: "Writing…", done: "Ready", failed: "Failed" }[job.state] ?? job.state,
      ),
      job.state === "done" ? ` · ${fmt.count(job.exported)} rows` : "",
    ),
  );
  if (job.failure_reason) card.append(h("p", { class: "form-error" }, job.failure_reason));
  if (job.state === "done") {
    card.append(
      jobDownload(
        ctx,
        job,
        "export-download",
        "Download the CSV",
        `${job.campaign_id}-${what}-${job.job_id}.csv`,
      ),
    );
  }
  return card;
}

/** The campaign's jobs that `keep` selects, or null when they could not be read (said to the
 * admin, except a 401, which signs them out). */
export async function campaignJobs(ctx, path, keep) {
  try {
    return (await ctx.api.call("GET", `${path}/jobs`)).jobs.filter(keep);
  } catch (failure) {
    if (failure?.status !== 401) ctx.say(explain(failure));
    return null;
  }
}

/** A button that downloads the file a job wrote, saved as `filename` (a failure is said). */
export function jobDownload(ctx, job, testid, label, filename) {
  const download = h(
    "button",
    { type: "button", class: "button button-secondary", dataset: { testid } },
    label,
  );
  download.addEventListener("click", async () => {
    download.disabled = true;
    try {
      await ctx.api.download(`/v1/jobs/${encodeURIComponent(job.job_id)}/download`, filename);
    } catch (failure) {
      ctx.say(explain(failure));
    } finally {
      download.disabled = false;
    }
  });
  return download;
}
