// shoal dashboard: renders the server-sent stream (/ui/stream), charts the
// metrics series (/v1/groups/G/series) with uPlot, and submits scale and
// deploy jobs to the API with the session cookie.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { group: "", range: "1h", es: null, plot: null, zoomed: false, ticks: 0, events: [] };
const maxEventRows = 200;

function fmt(v, digits, unit) {
  if (v === null || v === undefined) return "–";
  return v.toFixed(digits) + (unit || "");
}

function time(s) {
  return s ? new Date(s).toLocaleTimeString() : "";
}

function row(cells, attrs) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    const [text, cls] = Array.isArray(c) ? c : [c, ""];
    td.textContent = text === undefined || text === null ? "" : String(text);
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  Object.assign(tr.dataset, attrs || {});
  return tr;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function decisionText(e) {
  return e ? `${time(e.time)} ${e.outcome}: ${e.reason}` : "";
}

function renderOverview(m) {
  const rows = m.status.groups.map((g) => {
    const live = m.live[g.name] || { cpu: {}, latency_ms: {} };
    const tr = row([
      g.name,
      [g.desired, "num"],
      [g.in_service, "num"],
      [fmt(live.cpu.p90, 1, " %"), "num"],
      [fmt(live.requests_per_second, 1), "num"],
      [fmt(live.latency_ms.p99, 1, " ms"), "num"],
      [decisionText(m.last[g.name]), "reason"],
    ], { group: g.name });
    if (g.name === state.group) tr.className = "sel";
    tr.addEventListener("click", () => { location.hash = "group=" + encodeURIComponent(g.name); });
    return tr;
  });
  fill($("#overview tbody"), rows);
}

function stateClass(s) {
  s = String(s || "");
  if (s === "in-service" || s === "UP" || s.startsWith("UP ") || s === "done" || s === "accepted" || s === "running") return "ok";
  if (s === "failed" || s === "DOWN" || s.startsWith("DOWN ") || s === "ignored" || s === "error" || s === "unhealthy") return "bad";
  return "warn";
}

function renderGroup(m) {
  const g = m.status.groups.find((x) => x.name === state.group);
  if (!g) {
    $("#group-info").textContent = "no such group";
    return;
  }
  const live = m.live[g.name] || { instances: [] };
  let info = `desired ${g.desired} (min ${g.min_size}, max ${g.max_size}), in service ${g.in_service}, plan ${g.plan || "–"}, version ${g.version || "–"}`;
  const now = new Date(m.time);
  for (const [k, label] of [["up_cooldown_until", "scale-out"], ["down_cooldown_until", "scale-in"]]) {
    if (g[k] && new Date(g[k]) > now) info += `; ${label} cooldown until ${time(g[k])}`;
  }
  if (g.haproxy_error) info += `; HAProxy: ${g.haproxy_error}`;
  $("#group-info").textContent = info;

  const cpu = {};
  for (const i of live.instances || []) cpu[i.name] = i.cpu.avg;
  fill($("#instances tbody"), g.instances.map((i) => row([
    i.name,
    [i.state, stateClass(i.state)],
    [i.health, stateClass(i.health)],
    [[i.check, i.check_code ? `(${i.check_code})` : "", i.check_desc || ""].join(" ").trim(), "reason"],
    [i.sessions, "num"],
    [fmt(cpu[i.name], 1, " %"), "num"],
    i.version,
    i.addr,
  ], { instance: i.name })));

  fill($("#jobs tbody"), (m.jobs || []).map((j) => row([
    j.id, time(j.created_at), j.kind + (j.plan ? " " + j.plan : ""), j.source,
    [`${j.from} → ${j.target}`, "num"], [j.state, stateClass(j.state)], [j.reason, "reason"],
  ], { job: j.id })));

  if (m.events && m.events.length) {
    state.events = m.events.slice().reverse().concat(state.events).slice(0, maxEventRows);
    // An event of no group (a host, HAProxy, a certificate) concerns each.
    fill($("#events tbody"), state.events.map((e) => row([
      new Date(e.time).toLocaleString(), e.group ? e.rule : e.rule + " (all groups)", [e.outcome, stateClass(e.outcome)],
      [`${e.current} → ${e.recommendation}`, "num"], [e.reason, "reason"], e.job_id,
    ], { group: e.group })));
  }
}

const seriesNames = ["size", "ready", "cpu.p90", "requests_per_second", "latency_ms.p99"];

function chartOpts() {
  const width = Math.max(300, $("#chart").clientWidth || 800);
  const axis = (scale, label, side) => ({ scale, label, side, grid: { show: side === 3 } });
  return {
    width, height: 300,
    cursor: { drag: { x: true, y: false } },
    hooks: { setSelect: [() => { state.zoomed = true; }] },
    scales: { x: { time: true }, n: { range: (u, lo, hi) => [0, Math.max(1, hi + 1)] }, pct: { range: [0, 100] }, rps: {}, ms: {} },
    series: [
      {},
      { label: "instances", scale: "n", stroke: "#1769aa", width: 2, paths: uPlot.paths.stepped({ align: 1 }) },
      { label: "ready", scale: "n", stroke: "#7fb2dc", width: 1, paths: uPlot.paths.stepped({ align: 1 }) },
      { label: "CPU p90 %", scale: "pct", stroke: "#d9480f", value: (u, v) => fmt(v, 1) },
      { label: "req/s", scale: "rps", stroke: "#2b8a3e", value: (u, v) => fmt(v, 1) },
      { label: "p99 ms", scale: "ms", stroke: "#862e9c", value: (u, v) => fmt(v, 1) },
    ],
    axes: [{}, axis("n", "instances", 3), axis("pct", "CPU %", 1), axis("rps", "req/s", 1), axis("ms", "p99 ms", 1)],
  };
}

async function loadSeries() {
  const g = state.group;
  const q = new URLSearchParams({ window: state.range, points: "360" });
  const r = await fetch(`/v1/groups/${encodeURIComponent(g)}/series?${q}`, { credentials: "same-origin" });
  if (r.status === 401) { location.reload(); return; }
  if (!r.ok || g !== state.group) return;
  const s = await r.json();
  const data = [s.times].concat(seriesNames.map((n) => s.values[n] || []));
  const chart = $("#chart");
  if (!state.plot) {
    chart.replaceChildren();
    state.plot = new uPlot(chartOpts(), data, chart);
    chart.addEventListener("dblclick", () => { state.zoomed = false; });
  } else {
    state.plot.setData(data, !state.zoomed);
  }
  chart.dataset.points = String((s.values.size || []).filter((v) => v !== null).length);
}

function render(m) {
  state.ticks++;
  $("#clock").textContent = new Date(m.time).toLocaleString();
  renderOverview(m);
  if (!state.group) return;
  renderGroup(m);
  // The last hour moves every second; longer ranges are read every 30 s.
  if (state.range === "1h" || state.ticks % 30 === 1) loadSeries().catch((e) => console.warn(e));
}

function connect() {
  if (state.es) state.es.close();
  state.ticks = 0;
  const q = state.group ? "?group=" + encodeURIComponent(state.group) : "";
  const es = new EventSource("/ui/stream" + q);
  es.onopen = () => { $("#conn").textContent = "live"; $("#conn").className = "on"; };
  es.onerror = () => { $("#conn").textContent = "reconnecting"; $("#conn").className = "off"; };
  es.onmessage = (ev) => render(JSON.parse(ev.data));
  state.es = es;
}

function route() {
  const p = new URLSearchParams(location.hash.slice(1));
  state.group = p.get("group") || "";
  state.events = [];
  state.zoomed = false;
  if (state.plot) { state.plot.destroy(); state.plot = null; }
  $("#chart").dataset.points = "0";
  for (const t of ["#instances tbody", "#jobs tbody", "#events tbody"]) fill($(t), []);
  $("#result").textContent = "";
  $("#group").hidden = !state.group;
  $("#group-name").textContent = state.group;
  connect();
}

// submit posts a job request and shows the answer: the job, an ignored
// job with its reason, or the error.
async function submit(path, body) {
  const out = $("#result");
  out.className = "";
  out.textContent = "…";
  const r = await fetch(`/v1/groups/${encodeURIComponent(state.group)}/${path}`, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(Object.assign({ source: "dashboard" }, body)),
  });
  if (r.status === 401) { location.reload(); return; }
  const a = await r.json();
  if (!r.ok) {
    out.className = "bad";
    out.textContent = a.error + (a.valid ? ` (valid: ${a.valid.join(", ")})` : "");
    return;
  }
  out.className = a.state === "ignored" ? "ignored" : "ok";
  out.textContent = `job ${a.id}: ${a.kind} ${a.from} → ${a.target}: ${a.state}` + (a.reason ? ` (${a.reason})` : "");
  out.dataset.job = a.id;
  out.dataset.state = a.state;
}

function init() {
  for (const b of [$("#scale-up"), $("#scale-down")]) {
    b.addEventListener("click", () => submit("scale", { direction: b.dataset.direction }));
  }
  $("#scale-plan").addEventListener("click", () => submit("scale", { plan: $("#plan").value.trim() }));
  $("#deploy").addEventListener("click", () => {
    if (confirm(`Deploy ${state.group}: replace every instance with the configured template?`)) submit("deploy", {});
  });
  for (const b of document.querySelectorAll(".ranges button")) {
    b.addEventListener("click", () => {
      for (const o of document.querySelectorAll(".ranges button")) o.classList.toggle("on", o === b);
      state.range = b.dataset.range;
      state.zoomed = false;
      loadSeries().catch((e) => console.warn(e));
    });
  }
  window.addEventListener("hashchange", route);
  route();
}

init();
