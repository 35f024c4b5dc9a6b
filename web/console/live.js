// The sale, live: admin_api's counters (`GET /v1/campaigns/{id}/live`, read from the sharded
// counters and the waiting room, never a read per claim) every 2 s, as numbers and as a
// burn-down chart of the remaining codes.

import uPlot from "./vendor/uPlot.esm.js";
import { explain } from "./api.js";
import { fmt, h, section } from "./dom.js";

export const REFRESH_MS = 2000;
// Points kept on the chart: an hour at one a refresh, beyond the series the API keeps.
const MAX_POINTS = 1800;

const STATS = [
  ["remaining", "Codes left"],
  ["claimed", "Claimed"],
  ["held", "Held for checkout"],
  ["redeemed", "Redeemed"],
  ["released", "Released"],
  ["queue", "In the waiting room"],
  ["admitted", "Admitted a second"],
  ["per-minute", "Claims a minute"],
  ["sell-out", "Sold out in"],
];

export function renderLive(ctx, slot, campaign) {
  const values = {};
  const stats = h(
    "dl",
    { class: "stats" },
    STATS.map(([key, label]) =>
      h(
        "div",
        { class: "stat" },
        h("dt", {}, label),
        (values[key] = h("dd", { dataset: { testid: `stat-${key}` } }, "–")),
      ),
    ),
  );
  const chart = h("div", {
    class: "chart",
    dataset: { testid: "burn-down" },
    role: "img",
    "aria-label": "Codes left over time",
  });
  const updated = h("p", { class: "hint" }, "Waiting for the first numbers…");
  slot.append(
    section(
      { id: "live", title: "The sale, live", testid: "live" },
      stats,
      h("h3", {}, "Codes left over time"),
      chart,
      updated,
    ),
  );

  const times = [];
  const remaining = [];
  const plot = new uPlot(
    {
      width: chartWidth(chart),
      height: 260,
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      axes: [{ stroke: "#1b1530" }, { stroke: "#1b1530", size: 60 }],
      series: [
        {},
        { label: "Codes left", stroke: "#b0175f", width: 2, fill: "rgba(176, 23, 95, 0.12)" },
      ],
      legend: { show: false },
      cursor: { show: false },
    },
    [times, remaining],
    chart,
  );
  const resize = () => plot.setSize({ width: chartWidth(chart), height: 260 });
  window.addEventListener("resize", resize);

  let timer = null;
  let stopped = false;
  const path = `/v1/campaigns/${encodeURIComponent(campaign.campaign_id)}/live`;

  async function refresh() {
    if (stopped) return;
    try {
      const live = await ctx.api.call("GET", path);
      if (stopped) return;
      show(live);
      updated.textContent = `Updated ${fmt.exactTime(new Date().toISOString())}, every ${REFRESH_MS / 1000} seconds.`;
    } catch (failure) {
      if (failure?.status === 401) return;
      updated.textContent = `The numbers could not be refreshed: ${explain(failure)} Retrying…`;
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }

  function show(live) {
    values.remaining.textContent = fmt.count(live.remaining);
    values.claimed.textContent = fmt.count(live.claimed);
    values.held.textContent = fmt.count(live.held);
    values.redeemed.textContent = fmt.count(live.redeemed);
    values.released.textContent = fmt.count(live.released);
    // Without a waiting room nobody queues, and nobody is admitted: shoppers claim at once.
    values.queue.textContent = fmt.count(live.queue_depth ?? 0);
    values.admitted.textContent =
      live.admitted_per_second == null
        ? "–"
        : String(Math.round(live.admitted_per_second * 10) / 10);
    values["per-minute"].textContent = fmt.count(live.claims_per_minute);
    values["sell-out"].textContent =
      live.remaining === 0 ? "Sold out" : fmt.duration(live.seconds_to_sell_out);
    merge(live);
    plot.setData([times, remaining]);
    if (remaining.length) {
      chart.setAttribute(
        "aria-label",
        `Codes left over time: ${fmt.count(remaining[0])} at ${fmt.exactTime(new Date(times[0] * 1000).toISOString())}, ` +
          `${fmt.count(remaining.at(-1))} now.`,
      );
    }
  }

  /** The API's series (a point a minute over the last hour), then a point every refresh;
   * the oldest points dropped. */
  function merge(live) {
    const points = [
      ...live.series.map((p) => [Date.parse(p.minute) / 1000, p.remaining]),
      [Date.parse(live.at) / 1000, live.remaining],
    ];
    for (const [t, value] of points) {
      if (!Number.isFinite(t) || value == null) continue;
      if (times.length && t <= times.at(-1)) continue;
      times.push(t);
      remaining.push(value);
    }
    if (times.length > MAX_POINTS) {
      times.splice(0, times.length - MAX_POINTS);
      remaining.splice(0, remaining.length - MAX_POINTS);
    }
  }

  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
    window.removeEventListener("resize", resize);
    plot.destroy();
  };
}

function chartWidth(element) {
  return Math.max(
    260,
    Math.floor(element.getBoundingClientRect().width || element.parentElement.clientWidth - 40),
  );
}
