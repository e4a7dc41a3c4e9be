// gpuctl dashboard: what every page's script shares. No framework; values go into the page as text.
"use strict";
const gpuctl = (() => {
  const pollMs = Number(document.body.dataset.pollMs) || 3000;
  const palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];

  async function getJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (!response.ok) {
      throw new Error(`HTTP ${response.status}`);
    }
    return response.json();
  }

  function live(problem) {
    const el = document.getElementById("live");
    el.textContent = problem ? `not updating (${problem})` : `updated ${new Date().toLocaleTimeString()}`;
  }

  // Run fn now and then every pollMs; a failure shows in the header and the next poll tries again.
  function every(fn, now = false) {
    async function tick() {
      try {
        await fn();
        live(null);
      } catch (err) {
        live(err.message);
      }
      setTimeout(tick, pollMs);
    }
    setTimeout(tick, now ? 0 : pollMs);
  }

  function el(tag, text, attrs = {}) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  }

  const utc = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");

  // A uPlot line chart in `box`: data is [xs, ...ys]; series: [{label, color?, scale?, dash?}].
  // Every point is drawn, so a series of one point shows.
  function chart(box, series, data, axes = {}) {
    const width = Math.max(box.clientWidth, 300);
    const opts = {
      width, height: 220, tzDate: utc, legend: { live: false },
      scales: { x: { time: axes.time !== false } },
      series: [{}, ...series.map((s, i) => ({
        label: s.label, stroke: s.color || palette[i % palette.length], width: 2, scale: s.scale || "y",
        dash: s.dash, points: { show: true, size: 5 }, spanGaps: true,
      }))],
      axes: [{}, { label: axes.y || "", size: 60 }, ...(axes.y2 ? [{ scale: "y2", side: 1, label: axes.y2, grid: { show: false }, size: 60 }] : [])],
    };
    if (box.uplot) box.uplot.destroy();
    box.uplot = new uPlot(opts, data, box);
    return box.uplot;
  }

  window.addEventListener("resize", () => {
    for (const box of document.querySelectorAll(".chart")) {
      if (box.uplot) box.uplot.setSize({ width: Math.max(box.clientWidth, 300), height: 220 });
    }
  });

  return { getJSON, every, el, chart, live, palette, pollMs };
})();
