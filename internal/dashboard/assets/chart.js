// shoal dashboard: the group chart, hand-drawn SVG. Panels share one time
// axis, one panel a unit, each with its own labelled y axis: the instance
// count as a step line (with the group's min and max), then CPU %, req/s,
// latency ms, each metric with the policy's target or thresholds drawn on
// it. Decisions and jobs are markers across the panels, named above them.
// Every element carries data attributes naming what it shows, which the
// browser test reads.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function svg(name, attrs, parent, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

// Panels by unit, top to bottom, with their axis labels.
const panelOrder = [
  ["instances", "instances"], ["%", "CPU %"], ["req/s", "req/s"], ["ms", "latency ms"], ["/s", "per second"], ["", "count"],
];
const seriesLabel = {
  size: "instances", ready: "ready", "cpu.p90": "CPU p90", "cpu.avg": "CPU avg", "cpu.max": "CPU max",
  requests_per_second: "req/s", "latency_ms.p99": "p99", "latency_ms.p90": "p90", "latency_ms.p50": "p50",
};
const colors = ["#c2255c", "#0b7285", "#5f3dc4", "#66a80f", "#e67700"];
const seriesColor = {
  size: "#1769aa", ready: "#7fb2dc", "cpu.p90": "#d9480f", "cpu.avg": "#f59f00",
  requests_per_second: "#2b8a3e", "latency_ms.p99": "#862e9c",
};

function label(m) { return seriesLabel[m] || m; }

function fmtNum(v) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  return a >= 100 || Number.isInteger(v) ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
}

// niceScale rounds hi up to a round top (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
// times a power of ten) and says in how many round steps to tick it.
function niceScale(hi) {
  if (!(hi > 0)) return { hi: 1, ticks: 5 };
  const p = Math.pow(10, Math.floor(Math.log10(hi)));
  for (const [m, ticks] of [[1, 5], [1.5, 3], [2, 4], [2.5, 5], [3, 3], [4, 4], [5, 5], [6, 3], [8, 4]]) {
    if (m * p >= hi * (1 - 1e-9)) return { hi: m * p, ticks };
  }
  return { hi: 10 * p, ticks: 5 };
}

const timeSteps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

function timeLabel(t, step) {
  const d = new Date(t * 1000);
  const p = (n) => String(n).padStart(2, "0");
  if (step >= 86400) return `${d.getMonth() + 1}/${d.getDate()}`;
  const hm = `${p(d.getHours())}:${p(d.getMinutes())}`;
  return step < 60 ? `${hm}:${p(d.getSeconds())}` : hm;
}

// drawChart renders series s (GET .../series) into el. o: { markers:
// [{t, kind, id, job, text, title, severity}], spans: [{from, to, job}],
// limits: {min, max}, zoom: [from, to] or null, onZoom(from, to),
// onMarker(marker) }. It returns the SVG.
function drawChart(el, s, o) {
  const width = Math.max(400, el.clientWidth || 900);
  const left = 70, right = 16, band = 60, panelGap = 26, bottom = 40;
  const step = s.step_s || 1;
  const n = s.times.length;
  let x0 = n ? s.times[0] : 0;
  let x1 = n ? s.times[n - 1] + step : 1;
  if (o.zoom) [x0, x1] = o.zoom;
  if (x1 <= x0) x1 = x0 + 1;
  const pw = width - left - right;
  const bridge = 5; // seconds without samples drawn as a line
  const X = (t) => left + ((t - x0) / (x1 - x0)) * pw;

  // Which panels: the units the series have, in panelOrder.
  const byUnit = {};
  for (const m of Object.keys(s.values)) {
    const u = (s.units || {})[m] || "";
    (byUnit[u] = byUnit[u] || []).push(m);
  }
  const panels = panelOrder.filter(([u]) => byUnit[u]).map(([u, axis]) => ({ unit: u, axis, metrics: byUnit[u] }));
  const heights = panels.map((p) => (p.unit === "instances" ? 130 : 110));
  const height = band + heights.reduce((a, h) => a + h + panelGap, 0) - 8 + bottom;

  const root = svg("svg", {
    width, height, viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
    "data-from": x0, "data-to": x1, "data-plot-left": left, "data-plot-right": left + pw,
  });
  svg("title", {}, root, "group chart");
  let colorIdx = 0;
  const color = (m) => seriesColor[m] || colors[colorIdx++ % colors.length];
  const cursors = [], boxes = []; // boxes: each panel's [top, bottom]
  // The time axis' group comes first, so its grid lies under the panels'.
  const xg = svg("g", { class: "x-axis" }, root);
  let y = band;
  panels.forEach((p, pi) => {
    const h = heights[pi];
    const top = y + panelGap - 8;
    const g = svg("g", { class: "panel", "data-unit": p.unit, "data-metrics": p.metrics.join(" ") }, root);
    const lines = (s.policy || []).filter((l) => p.metrics.includes(l.metric));
    // The y scale: from 0 to what the data and the lines reach.
    let hi = 0;
    for (const m of p.metrics) for (const v of s.values[m]) if (v !== null && v > hi) hi = v;
    for (const l of lines) hi = Math.max(hi, l.value);
    let ticks;
    if (p.unit === "instances") {
      // The group's max, when it is not far above the count, shows the
      // room left; a max of 100 would flatten a count of 2.
      if (o.limits && o.limits.max <= Math.max(4, 2 * hi)) hi = Math.max(hi, o.limits.max);
      hi = Math.max(1, Math.ceil(hi)) + 1;
      // Whole instances between ticks.
      const tick = Math.max(1, Math.ceil(hi / 5));
      hi = Math.ceil(hi / tick) * tick;
      ticks = hi / tick;
    } else {
      // CPU from 0 to 100 % unless it goes beyond; the rest with room
      // above their highest value.
      ({ hi, ticks } = p.unit === "%" && hi <= 100 ? { hi: 100, ticks: 5 } : niceScale(hi * 1.1));
    }
    const Y = (v) => top + h - (v / hi) * h;
    boxes.push([top, top + h]);
    const clip = `clip-${pi}`;
    svg("rect", { x: left, y: top, width: pw, height: h }, svg("clipPath", { id: clip }, g));
    svg("rect", { class: "plot", x: left, y: top, width: pw, height: h }, g);
    // y axis: ticks with the unit's numbers; the label names the unit.
    for (let i = 0; i <= ticks; i++) {
      const v = (hi * i) / ticks;
      svg("line", { class: "grid", x1: left, x2: left + pw, y1: Y(v), y2: Y(v) }, g);
      svg("text", { class: "tick", x: left - 6, y: Y(v) + 4, "text-anchor": "end" }, g, fmtNum(v));
    }
    svg("text", {
      class: "axis-label", "data-unit": p.unit, x: 14, y: top + h / 2, "text-anchor": "middle",
      transform: `rotate(-90 14 ${top + h / 2})`,
    }, g, p.axis);

    const plot = svg("g", { "clip-path": `url(#${clip})` }, g);
    if (p.unit === "instances") {
      for (const sp of o.spans || []) {
        const a = X(sp.from), b = X(sp.to);
        svg("rect", { class: "job-span", "data-job": sp.job, x: a, y: top, width: Math.max(2, b - a), height: h }, plot);
      }
      for (const [k, v] of Object.entries(o.limits || {})) {
        svg("line", { class: "limit", "data-kind": k, "data-value": v, x1: left, x2: left + pw, y1: Y(v), y2: Y(v) }, plot);
        svg("text", { class: "limit-label", x: left + pw - 4, y: Y(v) - 3, "text-anchor": "end" }, plot, `${k} ${v}`);
      }
    }
    // The policy's lines, on the metric each watches.
    for (const l of lines) {
      const yy = Y(l.value);
      svg("line", {
        class: "policy " + l.kind, "data-metric": l.metric, "data-kind": l.kind, "data-value": l.value, "data-rule": l.rule,
        x1: left, x2: left + pw, y1: yy, y2: yy,
      }, plot);
      const what = l.kind === "target" ? "target" : `${l.rule}: ${l.kind}`;
      svg("text", { class: "policy-label", "data-metric": l.metric, x: left + 4, y: yy - 3 }, plot,
        `${what} ${fmtNum(l.value)} ${p.unit} (${label(l.metric)})`);
    }
    // The series: counts as steps, the rest as lines through the steps'
    // middles. A step's count is its last (the series says), so it holds
    // from the step's end, when it was known, to the next's: the line
    // rises after the job that started an instance, never before (the
    // first holds from the data's start). A gap of a few seconds without
    // samples (a late tick on a busy host) is bridged; a longer one breaks
    // the line.
    const legend = svg("g", { class: "legend" }, g);
    let lx = left + pw;
    const items = [];
    for (const m of p.metrics) {
      const vals = s.values[m];
      const stepped = p.unit === "instances";
      let d = "", pen = false, gap = 0, drawn = false;
      vals.forEach((v, i) => {
        if (v === null) {
          gap++;
          if ((gap + 1) * step > bridge) pen = false;
          return;
        }
        gap = 0;
        const t = s.times[i];
        if (stepped) {
          const a = X(t + step).toFixed(1), b = X(t + 2 * step).toFixed(1), yv = Y(v).toFixed(1);
          d += pen ? `H${a}V${yv}H${b}` : `M${drawn ? a : X(t).toFixed(1)},${yv}H${b}`;
          drawn = true;
        } else {
          d += `${pen ? "L" : "M"}${X(t + step / 2).toFixed(1)},${Y(v).toFixed(1)}`;
        }
        pen = true;
      });
      const last = vals.filter((v) => v !== null).pop();
      const c = color(m);
      svg("path", {
        class: "series" + (m === "ready" ? " dashed" : ""), d, stroke: c, "data-metric": m, "data-shape": stepped ? "step" : "line",
        "data-last": last === undefined ? "" : last, "data-values": JSON.stringify(vals),
      }, plot);
      items.push({ m, c, vals, stepped });
    }
    // Legend, right-aligned above the panel: name and value (the newest,
    // or the one under the cursor).
    for (const it of items.reverse()) {
      const t = svg("text", { class: "legend-item", "data-metric": it.m, y: top - 4, "text-anchor": "end" }, legend);
      const show = (v) => {
        t.replaceChildren();
        svg("tspan", { fill: it.c }, t, "■ ");
        svg("tspan", {}, t, `${label(it.m)} ${fmtNum(v)}${p.unit === "instances" ? "" : " " + p.unit}`);
      };
      const newest = it.vals.filter((v) => v !== null).pop();
      show(newest === undefined ? null : newest);
      t.setAttribute("x", lx);
      lx -= 18 + 7.2 * (label(it.m).length + 8 + p.unit.length);
      // Under the cursor: the value drawn there (a count, the previous
      // step's, which holds from this step's start).
      cursors.push((i) => show(i === null ? (newest === undefined ? null : newest) : it.vals[it.stepped ? Math.max(0, i - 1) : i]));
    }
    y += h + panelGap;
  });
  // plotBottom: the last panel's bottom.
  const plotTop = band + panelGap - 8, plotBottom = y - 8;

  // x axis: time ticks at a round step, about one per 110 px.
  const g = xg;
  const want = (x1 - x0) / Math.max(2, pw / 110);
  const ts = timeSteps.find((v) => v >= want) || 86400 * Math.ceil(want / 86400);
  for (let t = Math.ceil(x0 / ts) * ts; t <= x1; t += ts) {
    for (const [a, b] of boxes) svg("line", { class: "grid", x1: X(t), x2: X(t), y1: a, y2: b }, g);
    if (X(t) < left + pw - 28) svg("text", { class: "tick", x: X(t), y: plotBottom + 14, "text-anchor": "middle" }, g, timeLabel(t, ts));
  }
  svg("text", { class: "axis-label", "data-unit": "time", x: left + pw, y: plotBottom + 32, "text-anchor": "end" }, g,
    `time (local), ${Math.round(x1 - x0)} s shown`);

  // Markers: a line across the panels and a named flag in the band on
  // top, in the first row where the name covers no other (near the right
  // edge, to the line's left). Where no row has room, a bare flag under
  // the rows: its name is its tooltip (zoom in to read it).
  const mg = svg("g", { class: "markers" }, root);
  const rows = [-Infinity, -Infinity, -Infinity, -Infinity];
  for (const mk of (o.markers || []).filter((m) => m.t >= x0 && m.t <= x1).sort((a, b) => a.t - b.t)) {
    const x = X(mk.t);
    let w = 7 * mk.text.length + 10;
    let lx = x + w > width - 2 ? x - w : x;
    let r = rows.findIndex((end) => end < lx);
    const named = r >= 0;
    if (named) rows[r] = lx + w;
    else {
      r = rows.length;
      w = 6;
      lx = x - 3;
    }
    const m = svg("g", { class: `marker ${mk.kind} ${mk.severity || ""}`, "data-kind": mk.kind, "data-id": mk.id, "data-job": mk.job || "", "data-name": mk.text, tabindex: 0 }, mg);
    svg("title", {}, m, mk.title || mk.text);
    svg("line", { x1: x, x2: x, y1: 6 + r * 14, y2: plotBottom }, m);
    svg("rect", { x: lx, y: 6 + r * 14 - 1, width: w, height: named ? 13 : 8, rx: 2 }, m);
    if (named) svg("text", { class: "marker-label", x: lx + 4, y: 6 + r * 14 + 9 }, m, mk.text);
    if (o.onMarker) m.addEventListener("click", () => o.onMarker(mk));
  }

  // Hover shows the values under the cursor; a drag zooms to its span, a
  // double-click resets.
  const cursor = svg("line", { class: "cursor", y1: plotTop, y2: plotBottom, visibility: "hidden" }, root);
  const sel = svg("rect", { class: "selection", y: plotTop, height: plotBottom - plotTop, width: 0, visibility: "hidden" }, root);
  const T = (ev) => {
    const r = root.getBoundingClientRect();
    const px = Math.min(left + pw, Math.max(left, ev.clientX - r.left));
    return { px, t: x0 + ((px - left) / pw) * (x1 - x0) };
  };
  let drag = null;
  // A redraw would lose a drag in progress; the caller waits for its end.
  root.busy = () => drag !== null;
  root.addEventListener("mousemove", (ev) => {
    const { px, t } = T(ev);
    cursor.setAttribute("x1", px);
    cursor.setAttribute("x2", px);
    cursor.setAttribute("visibility", "visible");
    const i = Math.floor((t - (n ? s.times[0] : 0)) / step);
    for (const c of cursors) c(i >= 0 && i < n ? i : null);
    if (drag !== null) {
      sel.setAttribute("x", Math.min(drag, px));
      sel.setAttribute("width", Math.abs(px - drag));
      sel.setAttribute("visibility", "visible");
    }
  });
  root.addEventListener("mouseleave", () => {
    cursor.setAttribute("visibility", "hidden");
    for (const c of cursors) c(null);
    drag = null;
    sel.setAttribute("visibility", "hidden");
  });
  root.addEventListener("mousedown", (ev) => { drag = T(ev).px; ev.preventDefault(); });
  root.addEventListener("mouseup", (ev) => {
    if (drag === null) return;
    const { px } = T(ev);
    const a = Math.min(drag, px), b = Math.max(drag, px);
    drag = null;
    sel.setAttribute("visibility", "hidden");
    if (b - a > 5 && o.onZoom) o.onZoom(x0 + ((a - left) / pw) * (x1 - x0), x0 + ((b - left) / pw) * (x1 - x0));
  });
  root.addEventListener("dblclick", () => { if (o.onZoom) o.onZoom(null); });
  el.replaceChildren(root);
  return root;
}
