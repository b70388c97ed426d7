// shoal dashboard: renders the server-sent stream (/ui/stream), charts the
// metrics series (/v1/groups/G/series) with the decisions and jobs on them
// (chart.js), and submits scale and deploy jobs to the API with the session
// cookie.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = {
  group: "", range: "1h", es: null, ticks: 0, events: [], jobs: [], status: null,
  series: null, chart: null, zoom: null, highlight: "", extraJobs: {},
};
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
    if (text instanceof Node) td.appendChild(text);
    else td.textContent = text === undefined || text === null ? "" : String(text);
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

// eventSeverity is what each fleet event (decision outcome "event", its
// rule and code naming the event.Type) means for the group: a launch is
// news, not a warning.
const eventSeverity = {
  "instance.launched": "ok", "instance.terminated": "info", "instance.replaced": "info", "host.up": "ok",
  "instance.launch_failed": "bad", "instance.terminate_failed": "bad", "host.down": "bad",
  "instance.unhealthy": "warn", "haproxy.restarted": "warn", "gslb.restarted": "warn",
  "leader.changed": "warn", "certificate.expiring": "warn",
  "instance.ejected": "warn", "instance.returned": "ok", "group.failing": "bad",
};

// severity is how the timeline paints a decision or event: ok, info, warn
// or bad.
function severity(e) {
  switch (e.outcome) {
    case "event": return eventSeverity[`${e.rule}.${e.code}`] || "info";
    case "accepted": case "request": return "ok";
    case "ignored": return "warn";
    case "error": return "bad";
    case "deploy": return { done: "ok", failed: "bad", ignored: "warn" }[e.code] || "info";
  }
  return "info"; // nothing, forecast only, scale_in, placement
}

// marked are the outcomes of decisions that asked for a job: the chart
// marks them.
const marked = ["request", "accepted", "ignored", "error", "forecast only"];

// jobLink is a link to job id in the jobs table.
function jobLink(id) {
  if (!id) return "";
  const a = document.createElement("a");
  a.href = "#";
  a.className = "job-link";
  a.dataset.job = id;
  a.textContent = "job " + id;
  a.addEventListener("click", (ev) => { ev.preventDefault(); showJob(id); });
  return a;
}

// showJob highlights job id in the jobs table, fetching it when it is
// older than the table's newest.
async function showJob(id) {
  state.highlight = id;
  if (!state.jobs.some((j) => j.id === id) && !state.extraJobs[id]) {
    const r = await fetch(`/v1/jobs/${encodeURIComponent(id)}`, { credentials: "same-origin" });
    if (r.ok) state.extraJobs[id] = await r.json();
  }
  renderJobs();
  const tr = document.querySelector(`#jobs tbody tr[data-job="${CSS.escape(id)}"]`);
  if (tr) tr.scrollIntoView({ block: "center" });
}

function renderJobs() {
  const list = state.jobs.concat(Object.values(state.extraJobs).filter((x) => !state.jobs.some((j) => j.id === x.id)));
  fill($("#jobs tbody"), list.map((j) => {
    const tr = row([
      j.id, time(j.created_at), j.kind + (j.plan ? " " + j.plan : ""), j.source,
      [`${j.from} → ${j.target}`, "num"], [j.state, stateClass(j.state)], [j.reason, "reason"],
    ], { job: j.id });
    if (j.id === state.highlight) tr.classList.add("hl");
    return tr;
  }));
}

function renderGroup(m) {
  const g = m.status.groups.find((x) => x.name === state.group);
  if (!g) {
    $("#group-info").textContent = "no such group";
    return;
  }
  state.status = g;
  const live = m.live[g.name] || { instances: [] };
  let info = `desired ${g.desired} (min ${g.min_size}, max ${g.max_size}), in service ${g.in_service}, plan ${g.plan || "–"}, version ${g.version || "–"}`;
  const now = new Date(m.time);
  for (const [k, label] of [["up_cooldown_until", "scale-out"], ["down_cooldown_until", "scale-in"]]) {
    if (g[k] && new Date(g[k]) > now) info += `; ${label} cooldown until ${time(g[k])}`;
  }
  if (g.haproxy_error) info += `; HAProxy: ${g.haproxy_error}`;
  // A cloud group's warm pool: out of rotation, outside its size.
  if (g.warm_pool && g.warm_pool.length) {
    const warm = g.warm_pool.filter((s) => s.state === "warm").length;
    info += `; warm pool ${g.warm_pool.length} (${warm} warm)`;
  }
  $("#group-info").textContent = info;

  const cpu = {};
  for (const i of live.instances || []) cpu[i.name] = i.cpu.avg;
  fill($("#instances tbody"), g.instances.map((i) => row([
    i.name,
    // An outlier stays in service, out of rotation until ejected_until.
    i.ejected_until ? [`${i.state}, ejected until ${time(i.ejected_until)}`, "bad"] : [i.state, stateClass(i.state)],
    [i.health, stateClass(i.health)],
    [[i.check, i.check_code ? `(${i.check_code})` : "", i.check_desc || ""].join(" ").trim(), "reason"],
    [i.sessions, "num"],
    [fmt(cpu[i.name], 1, " %"), "num"],
    i.version,
    i.addr,
  ], { instance: i.name })));

  state.jobs = m.jobs || [];
  renderJobs();

  if (m.events && m.events.length) {
    state.events = m.events.slice().reverse().concat(state.events).slice(0, maxEventRows);
    // An event of no group (a host, HAProxy, a certificate) concerns each.
    fill($("#events tbody"), state.events.map((e) => row([
      new Date(e.time).toLocaleString(), e.group ? e.rule : e.rule + " (all groups)",
      [e.outcome === "event" ? e.code : e.outcome, severity(e)],
      [`${e.current} → ${e.recommendation}`, "num"], [e.reason, "reason"], jobLink(e.job_id),
    ], { group: e.group, event: e.id, severity: severity(e) })));
  }
}

async function loadSeries() {
  const g = state.group;
  const q = new URLSearchParams({ window: state.range, points: "360" });
  const r = await fetch(`/v1/groups/${encodeURIComponent(g)}/series?${q}`, { credentials: "same-origin" });
  if (r.status === 401) { location.reload(); return; }
  if (!r.ok || g !== state.group) return;
  state.series = await r.json();
  drawGroupChart();
}

const secs = (s) => new Date(s).getTime() / 1000;

// drawGroupChart draws the series with the decisions that asked for a job
// and the jobs as markers; each job's run is a band on the instances.
function drawGroupChart() {
  const s = state.series, chart = $("#chart");
  if (!s || (state.chart && state.chart.busy())) return;
  const markers = [], spans = [];
  for (const e of state.events) {
    if (e.group !== state.group || !marked.includes(e.outcome)) continue;
    const dir = e.request ? e.request.kind + " " : "";
    markers.push({
      t: secs(e.time), kind: "decision", id: e.id, job: e.job_id, severity: severity(e),
      text: `${e.rule}: ${dir}${e.current}→${e.recommendation}`, title: `${e.outcome}: ${e.reason}`,
    });
  }
  const now = Date.now() / 1000;
  for (const j of state.jobs) {
    markers.push({
      t: secs(j.created_at), kind: "job", id: j.id, job: j.id, severity: stateClass(j.state),
      text: `job ${j.id}: ${j.kind} ${j.from}→${j.target}`, title: `job ${j.id} (${j.source}): ${j.state}${j.reason ? ": " + j.reason : ""}`,
    });
    if (j.state !== "ignored") spans.push({ job: j.id, from: secs(j.started_at || j.created_at), to: j.finished_at ? secs(j.finished_at) : now });
  }
  const g = state.status;
  state.chart = drawChart(chart, s, {
    markers, spans, zoom: state.zoom,
    limits: g ? { min: g.min_size, max: g.max_size } : null,
    onZoom: (a, b) => { state.zoom = a === null ? null : [a, b]; drawGroupChart(); },
    onMarker: (mk) => { if (mk.job) showJob(mk.job); },
  });
  chart.dataset.points = String((s.values.size || []).filter((v) => v !== null).length);
}

function render(m) {
  state.ticks++;
  $("#clock").textContent = new Date(m.time).toLocaleString();
  renderOverview(m);
  if (!state.group) return;
  renderGroup(m);
  // The last hour moves every second; longer ranges are read every 30 s,
  // their markers drawn every second.
  if (state.range === "1h" || state.ticks % 30 === 1) loadSeries().catch((e) => console.warn(e));
  else drawGroupChart();
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
  state.jobs = [];
  state.extraJobs = {};
  state.highlight = "";
  state.zoom = null;
  state.series = null;
  state.chart = null;
  $("#chart").replaceChildren();
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
      state.zoom = null;
      loadSeries().catch((e) => console.warn(e));
    });
  }
  window.addEventListener("hashchange", route);
  route();
}

init();
