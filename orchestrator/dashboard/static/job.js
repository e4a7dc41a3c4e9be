// A job's page: polls /api/jobs/ID; updates the summary, the charts, the events and the logs (as text).
// The attempts timeline is drawn by the server; a new attempt or segment reloads the page.
"use strict";
(() => {
  const id = document.getElementById("job-id").dataset.job;
  const timeline = document.getElementById("timeline");

  function summary(values) {
    for (const dd of document.querySelectorAll("#summary dd[data-field]")) {
      const value = values[dd.dataset.field];
      if (value !== undefined && dd.textContent !== value) dd.textContent = value;
    }
  }

  function columns(points, count) {
    return Array.from({ length: count }, (_, i) => points.map((p) => p[i]));
  }

  function charts(detail) {
    const progress = document.getElementById("progress-chart");
    document.getElementById("progress-empty").hidden = detail.progress.length > 0;
    if (detail.progress.length > 0) {
      gpuctl.chart(progress, [{ label: "step" }, { label: "steps/s", scale: "y2", dash: [4, 3] }],
        columns(detail.progress, 3), { y: "step", y2: "steps/s" });
    }
    const gpu = document.getElementById("gpu-chart");
    document.getElementById("gpu-empty").hidden = detail.gpu.length > 0;
    if (detail.gpu.length > 0) {
      gpuctl.chart(gpu, [{ label: "mean %" }, { label: "p95 %", dash: [4, 3] }], columns(detail.gpu, 3), { y: "%" });
    }
  }

  function events(list) {
    const rows = list.map((e) => {
      const tr = gpuctl.el("tr");
      tr.append(gpuctl.el("td", e.time.slice(0, 19).replace("T", " ")), gpuctl.el("td", e.kind), gpuctl.el("td", e.message));
      return tr;
    });
    document.querySelector("#events tbody").replaceChildren(...rows);
  }

  function logs(tails) {
    const parts = [];
    for (const tail of tails) {
      parts.push(gpuctl.el("h3", tail.source));
      if (tail.note) parts.push(gpuctl.el("p", tail.note, { class: "note" }));
      parts.push(gpuctl.el("pre", tail.lines.join("\n"), { class: "log" }));
    }
    if (parts.length === 0) parts.push(gpuctl.el("p", "no output yet", { class: "nodata" }));
    document.getElementById("logs").replaceChildren(...parts);
  }

  async function refresh() {
    const detail = await gpuctl.getJSON(`/api/jobs/${encodeURIComponent(id)}`);
    const status = detail.status;
    if (String(status.attempts) !== timeline.dataset.attempts || String(status.segments.length) !== timeline.dataset.segments) {
      window.location.reload();
      return;
    }
    summary(detail.summary);
    charts(detail);
    events(detail.events);
    logs(detail.logs);
  }

  gpuctl.every(refresh, true);
})();
