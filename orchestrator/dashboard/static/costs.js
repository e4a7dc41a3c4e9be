// The costs page: draws the cost and savings over time and each budget's burn from /api/costs.
"use strict";
(() => {
  const params = new URLSearchParams(window.location.search);

  function costCharts(series) {
    const groups = Object.keys(series.cost_by_group);
    gpuctl.chart(document.getElementById("cost-chart"), groups.map((g) => ({ label: g })),
      [series.starts, ...groups.map((g) => series.cost_by_group[g])], { y: "USD" });
    gpuctl.chart(document.getElementById("savings-chart"), [{ label: "saved", color: "#59a14f" }],
      [series.starts, series.savings], { y: "USD" });
  }

  function burnCharts(budgets) {
    const box = document.getElementById("burn-charts");
    box.replaceChildren();
    for (const budget of budgets.slice(0, 6)) {
      const figure = gpuctl.el("figure");
      const limit = budget.monthly_usd === null ? "no limit" : `budget ${budget.monthly_usd.toFixed(2)} USD`;
      figure.append(gpuctl.el("figcaption", `${budget.name}: spent this month (${limit})`));
      const chartBox = gpuctl.el("div", null, { class: "chart" });
      figure.append(chartBox);
      box.append(figure);
      const xs = budget.daily.map((p) => p[0]);
      const spent = budget.daily.map((p) => p[1]);
      const series = [{ label: "spent" }, { label: "projected", dash: [4, 3] }];
      const projected = spent.map(() => null);
      projected[projected.length - 1] = budget.projected_usd;
      const data = [xs, spent, projected];
      if (budget.monthly_usd !== null) {
        series.push({ label: "budget", color: "#e15759" });
        data.push(xs.map(() => budget.monthly_usd));
      }
      gpuctl.chart(chartBox, series, data, { y: "USD" });
    }
  }

  async function draw() {
    const query = new URLSearchParams();
    for (const key of ["by", "since"]) {
      if (params.get(key)) query.set(key, params.get(key));
    }
    const found = await gpuctl.getJSON(`/api/costs?${query}`);
    costCharts(found.series);
    burnCharts(found.budgets);
  }

  draw().then(() => gpuctl.live(null), (err) => gpuctl.live(err.message));
})();
