// The jobs page: polls /api/jobs with the chosen filters and rewrites the table (as text).
"use strict";
(() => {
  const form = document.getElementById("filters");
  const body = document.querySelector("#jobs tbody");
  const FIELDS = ["team", "user", "state", "step", "throughput", "eta", "cost", "projected", "savings", "waiting", "gpu"];
  const NUMBERS = new Set(["cost", "projected", "savings"]);

  function chosen() {
    const params = new URLSearchParams();
    for (const select of form.querySelectorAll("select")) {
      if (select.value) params.set(select.name, select.value);
    }
    return params;
  }

  function rowOf(row) {
    const tr = gpuctl.el("tr", null, { "data-job": row.id });
    const first = gpuctl.el("td", null, { "data-field": "id" });
    first.append(gpuctl.el("a", row.id, { href: `/jobs/${encodeURIComponent(row.id)}` }));
    tr.append(first);
    for (const field of FIELDS) {
      tr.append(gpuctl.el("td", row[field], NUMBERS.has(field) ? { "data-field": field, class: "num" } : { "data-field": field }));
    }
    return tr;
  }

  function setOptions(filters) {
    for (const select of form.querySelectorAll("select")) {
      const keep = select.value;
      const values = new Set(filters[select.name] || []);
      if (keep) values.add(keep);
      select.replaceChildren(gpuctl.el("option", "all", { value: "" }),
        ...[...values].sort().map((v) => gpuctl.el("option", v, { value: v })));
      select.value = keep;
    }
  }

  async function refresh() {
    const data = await gpuctl.getJSON(`/api/jobs?${chosen()}`);
    const rows = data.rows.map(rowOf);
    if (rows.length === 0) {
      const tr = gpuctl.el("tr", null, { class: "empty" });
      tr.append(gpuctl.el("td", "no jobs", { colspan: "12" }));
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    document.getElementById("job-count").textContent = `${data.rows.length} job(s)`;
    setOptions(data.filters);
  }

  form.addEventListener("change", () => {
    const params = chosen().toString();
    history.replaceState(null, "", params ? `/?${params}` : "/");
    refresh().then(() => gpuctl.live(null), (err) => gpuctl.live(err.message));
  });
  gpuctl.every(refresh);
})();
