// shoal dashboard: renders the server-sent stream (/ui/stream), charts the
// metrics series (/v1/groups/G/series) with the decisions and jobs on them
// (chart.js), and submits scale, deploy and day-two jobs (an instance's
// drain, replace, protect, standby) and a host's cordon or drain to the API
// with the session cookie, each act after a confirmation.
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
  renderQueue(g.queue);

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
    i.provider,
    marks(instanceMarks(i)),
    [actButtons(instanceActs(i).map(([act, label]) => [act, label, () => instanceAct(i.name, act)])), "acts"],
  ], { instance: i.name, state: i.state, marks: instanceMarks(i).map(([m]) => m).join(" ") })));
  // The group's providers in its order: a scale-out fills them in turn,
  // a scale-in empties the last first.
  fill($("#providers tbody"), (g.providers || []).map((p) => row([
    p.name,
    [p.instances, "num"],
    [p.max || "–", "num"],
    [fmt(p.instance_hours_today, 2), "num"],
    [p.cost_per_hour ? p.cost_per_hour : "–", "num"],
    [p.cost_per_hour ? fmt(p.cost_today, 2) : "–", "num"],
    p.skipped_until ? [`until ${time(p.skipped_until)}: ${p.skip_reason}`, "bad"] : "–",
  ], { provider: p.name })));

  renderCanary(m.deploy);
  renderBlueGreen(m.deploy);
  state.jobs = m.jobs || [];
  renderJobs();
  followJob();

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

// renderQueue shows the group's queue in HAProxy (limits.max_conn): the
// requests waiting now, the most since HAProxy's reload and the average
// wait of the last 1024; hidden for a group that never queues.
function renderQueue(q) {
  const p = $("#group-queue");
  p.hidden = !q || !(q.max_conn > 0 || q.max > 0);
  if (p.hidden) return;
  const limit = q.max_conn > 0 ? `max_conn ${q.max_conn} per instance` : "no max_conn";
  p.textContent = `queue: ${q.current} waiting now, ${q.max} at most, ${q.time_ms} ms average wait (${limit})`;
  p.className = q.current > 0 ? "warn" : "";
  Object.assign(p.dataset, { current: q.current, max: q.max, timeMs: q.time_ms, maxConn: q.max_conn });
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

// instanceMarks are what an operator set on an instance or what holds it
// out of rotation: [mark, text] pairs.
function instanceMarks(i) {
  const out = [];
  if (i.protected) out.push(["protected", "protected"]);
  if (i.state === "standby" || i.state === "drained" || i.state === "draining") out.push([i.state, i.state]);
  if (i.ejected_until) out.push(["ejected", "ejected"]);
  if (i.drifted) out.push(["drifted", "drifted"]);
  return out;
}

function marks(list) {
  const span = document.createElement("span");
  for (const [m, text] of list) {
    const b = document.createElement("span");
    b.className = "mark " + m;
    b.dataset.mark = m;
    b.textContent = text;
    span.appendChild(b);
  }
  return span;
}

// instanceActs are the day-two acts that fit an instance's state; the core
// refuses, with its reason, one that no longer does.
function instanceActs(i) {
  const acts = [];
  switch (i.state) {
    case "in-service": acts.push(["drain", "Drain"], ["standby", "Standby"], ["replace", "Replace"]); break;
    case "unhealthy": acts.push(["replace", "Replace"]); break;
    case "drained": acts.push(["undrain", "Undrain"]); break;
    case "standby": acts.push(["resume", "Resume"]); break;
    case "starting": case "draining": case "stopping": case "failed": return [];
  }
  acts.push(i.protected ? ["unprotect", "Unprotect"] : ["protect", "Protect"]);
  return acts;
}

// actQuestion is the confirmation each act asks for.
const actQuestion = {
  drain: (n) => `Drain ${n}: take it out of rotation (its requests finish) and start a replacement?`,
  undrain: (n) => `Undrain ${n}: put it back in rotation?`,
  replace: (n) => `Replace ${n}: start a new instance and, once it serves, drain and stop ${n}?`,
  protect: (n) => `Protect ${n} from scale-in and recycling?`,
  unprotect: (n) => `Unprotect ${n}: scale-in and recycling may take it again?`,
  standby: (n) => `Put ${n} on standby: out of rotation, kept running, replaced to keep the group's size?`,
  resume: (n) => `Resume ${n}: put it back in rotation?`,
  cordon: (n) => `Cordon host ${n}: no new instances are placed there?`,
  uncordon: (n) => `Uncordon host ${n}: new instances may be placed there again?`,
  "drain-host": (n) => `Drain host ${n}: cordon it, then replace each of its instances elsewhere, one at a time?`,
};

function actButtons(list) {
  const span = document.createElement("span");
  for (const [act, label, run] of list) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.act = act;
    b.textContent = label;
    b.addEventListener("click", run);
    span.appendChild(b);
  }
  return span;
}

// confirmAct asks question in the page's dialog and resolves true when the
// operator confirms.
function confirmAct(question) {
  const d = $("#confirm");
  $("#confirm-text").textContent = question;
  return new Promise((resolve) => {
    const done = (yes) => () => {
      $("#confirm-yes").onclick = $("#confirm-no").onclick = d.oncancel = null;
      d.close();
      resolve(yes);
    };
    $("#confirm-yes").onclick = done(true);
    $("#confirm-no").onclick = d.oncancel = done(false);
    d.showModal();
  });
}

// instanceAct asks, then submits act on the named instance: a job on the
// one job path, shown in #result and followed until it ends.
async function instanceAct(name, act) {
  if (!(await confirmAct(actQuestion[act](name)))) return;
  await post("/v1/instances/" + encodeURIComponent(act), { instances: [name], source: "dashboard" }, showAnswer);
}

// hostAct asks, then cordons, uncordons or drains a provider's host.
async function hostAct(h, act) {
  if (!(await confirmAct(actQuestion[act === "drain" ? "drain-host" : act](h.name)))) return;
  const path = `/v1/hosts/${encodeURIComponent(h.name)}/${act}`;
  await post(path, { provider: h.provider }, (a, out) => {
    out.className = "ok";
    out.textContent = a.message;
    out.dataset.host = h.name;
    out.dataset.act = act;
  }, $("#host-result"));
}

// post sends body to path and shows the answer in out: done's rendering of
// a success, or the error with its reason.
async function post(path, body, done, out) {
  out = out || $("#result");
  out.className = "";
  out.textContent = "…";
  delete out.dataset.job;
  delete out.dataset.state;
  delete out.dataset.error;
  delete out.dataset.act;
  delete out.dataset.host;
  const r = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (r.status === 401) { location.reload(); return; }
  const a = await r.json();
  if (!r.ok) {
    out.className = "bad";
    out.textContent = a.error + (a.valid ? ` (valid: ${a.valid.join(", ")})` : "");
    out.dataset.error = a.error;
    return;
  }
  done(a, out);
}

// showAnswer shows a submitted job in #result: its state, and an ignored
// job's reason.
function showAnswer(a, out) {
  out.className = stateClass(a.state) === "bad" || a.state === "ignored" ? "ignored" : "ok";
  const what = a.instances && a.instances.length ? `${a.kind} ${a.instances.join(", ")}` : `${a.kind} ${a.from} → ${a.target}`;
  out.textContent = `job ${a.id}: ${what}: ${a.state}` + (a.reason ? ` (${a.reason})` : "");
  out.dataset.job = a.id;
  out.dataset.state = a.state;
}

// followJob updates #result's job from the stream's jobs until it ends.
function followJob() {
  const out = $("#result"), id = out.dataset.job;
  if (!id || ["done", "failed", "ignored"].includes(out.dataset.state)) return;
  const j = state.jobs.find((x) => x.id === id);
  if (j && j.state !== out.dataset.state) showAnswer(j, out);
}

function renderHosts(m) {
  const hosts = m.status.hosts || [];
  $("#hosts").hidden = hosts.length === 0;
  const drains = m.drains || [];
  fill($("#host-table tbody"), hosts.map((h) => {
    // The newest drain of the host.
    const d = drains.find((x) => x.provider === h.provider && x.host === h.name);
    let drain = "";
    if (d) {
      drain = d.state === "running" ? `running: ${d.progress}` : `${d.state}, ${d.moved.length} of ${d.instances.length} moved`;
      for (const l of d.left || []) drain += `; ${l.instance} left: ${l.reason}`;
    }
    const list = [];
    if (h.cordoned) list.push(["cordoned", "cordoned"]);
    if (h.held_off_until && new Date(h.held_off_until) > new Date(m.time)) list.push(["held-off", "held off until " + time(h.held_off_until)]);
    const acts = [h.cordoned ? ["uncordon", "Uncordon"] : ["cordon", "Cordon"], ["drain", "Drain"]];
    return row([
      h.provider, h.name, [h.state, h.state === "up" ? "ok" : "bad"], [h.instances, "num"], marks(list),
      [drain, d ? stateClass(d.state) + " reason" : "reason"],
      [actButtons(acts.map(([act, label]) => [act, label, () => hostAct(h, act)])), "acts"],
    ], { host: h.name, provider: h.provider, cordoned: h.cordoned ? "true" : "false", drain: d ? d.state : "" });
  }));
}

// renderSources shows metrics.sources (GET /v1/sources): each one's last
// value (a per-instance source's are its groups' averages, on their
// charts), its age, whether a policy may act on it, and its errors.
function renderSources(m) {
  const list = m.sources || [];
  $("#sources").hidden = list.length === 0;
  const now = new Date(m.time);
  fill($("#source-table tbody"), list.map((s) => {
    const age = s.last ? Math.max(0, (now - new Date(s.last)) / 1000) : null;
    const value = s.per_instance ? "per instance" : fmt(s.value, s.value !== undefined && Number.isInteger(s.value) ? 0 : 2);
    const st = s.last ? (s.stale ? `stale (max_age ${s.max_age}; on_missing ${s.on_missing})` : "fresh") : `no value yet (on_missing ${s.on_missing})`;
    return row([
      s.name, s.kind, [value, "num"], [age === null ? "–" : `${age.toFixed(0)} s`, "num"],
      [st, s.stale ? "bad" : "ok"], [s.errors, s.errors > 0 ? "num warn" : "num"], [s.last_error || "", "reason"],
    ], { source: s.name, stale: s.stale ? "true" : "false", value: s.value === undefined ? "" : String(s.value) });
  }));
}

function render(m) {
  state.ticks++;
  $("#clock").textContent = new Date(m.time).toLocaleString();
  renderOverview(m);
  renderSources(m);
  renderHosts(m);
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
  for (const t of ["#instances tbody", "#providers tbody", "#jobs tbody", "#events tbody"]) fill($(t), []);
  $("#result").textContent = "";
  $("#group").hidden = !state.group;
  $("#group-name").textContent = state.group;
  connect();
}

// renderCanary shows a running canary (GET /v1/groups/G/deploy): its
// step, weights, both versions' figures and the time left.
function renderCanary(d) {
  const c = d && d.canary;
  $("#canary").hidden = !c;
  if (!c) return;
  const ms = (ns) => (ns ? `${(ns / 1e6).toFixed(1)} ms` : "–");
  const fig = (f) => `${f.requests} requests, ${f.errors} 5xx (${(100 * f.error_rate).toFixed(2)} %), p99 ${ms(f.p99)} (${f.samples} samples)`;
  $("#canary-status").textContent = [
    `${c.version} vs stable ${c.stable}: step ${c.step}/${c.steps}, ${c.weight} %, ${c.phase}, ${(c.time_left / 1e9).toFixed(0)} s left`,
    `weights: canary ${c.canary_weight} on ${c.canary_instances}, stable ${c.stable_weight} on ${c.stable_instances}`,
    `canary: ${fig(c.canary)}`,
    `stable: ${fig(c.stable_figures)}`,
    c.analysis_verdict ? `analysis: ${c.analysis_verdict}` : "",
  ].filter(Boolean).join("\n");
}

// renderBlueGreen shows a blue/green deploy (GET /v1/groups/G/deploy):
// its phase, both sets, their weights and figures; its buttons only while
// it runs.
function renderBlueGreen(d) {
  const b = d && d.blue_green;
  $("#bluegreen").hidden = !b;
  if (!b) return;
  const ms = (ns) => (ns ? `${(ns / 1e6).toFixed(1)} ms` : "–");
  const fig = (f) => `${f.requests} requests, ${f.errors} 5xx (${(100 * f.error_rate).toFixed(2)} %), p99 ${ms(f.p99)} (${f.samples} samples)`;
  const phase = b.phase === "switched" && b.keep_until ? `switched, keeping blue until ${time(b.keep_until)}` : b.phase;
  $("#bluegreen-status").textContent = [
    `${b.version} (green) vs ${b.blue} (blue): ${phase}`,
    b.reason ? `why: ${b.reason}` : "",
    `green: ${b.green_instances}/${b.green_want} in service at weight ${b.green_weight}; blue: ${b.blue_instances} at weight ${b.blue_weight}`,
    `green: ${fig(b.green)}`,
    `blue: ${fig(b.blue_figures)}`,
    b.analysis_verdict ? `analysis at ${b.analysis_weight} %: ${b.analysis_verdict}` : "",
  ].filter(Boolean).join("\n");
  for (const btn of document.querySelectorAll("#bluegreen button")) btn.hidden = !b.running;
}

// canaryAct posts a canary checkpoint (pause, resume, promote, abort) or a
// blue/green deploy's (promote, rollback).
async function canaryAct(act) {
  const out = $("#result");
  const r = await fetch(`/v1/groups/${encodeURIComponent(state.group)}/deploy/${act}`, { method: "POST", credentials: "same-origin" });
  if (r.status === 401) { location.reload(); return; }
  const a = await r.json();
  out.className = r.ok ? "ok" : "bad";
  out.textContent = r.ok ? `deploy: ${act}` : a.error;
}

// submit posts a group's job request (scale, deploy) and shows the answer:
// the job, an ignored job with its reason, or the error.
async function submit(path, body) {
  await post(`/v1/groups/${encodeURIComponent(state.group)}/${path}`, Object.assign({ source: "dashboard" }, body), showAnswer);
}

function init() {
  for (const b of [$("#scale-up"), $("#scale-down")]) {
    b.addEventListener("click", () => submit("scale", { direction: b.dataset.direction }));
  }
  $("#scale-plan").addEventListener("click", () => submit("scale", { plan: $("#plan").value.trim() }));
  $("#deploy").addEventListener("click", () => {
    confirmAct(`Deploy ${state.group}: replace every instance with the configured template?`).then((yes) => { if (yes) submit("deploy", {}); });
  });
  for (const b of document.querySelectorAll("#bluegreen button")) {
    b.addEventListener("click", () => {
      if (b.dataset.act !== "rollback") { canaryAct(b.dataset.act); return; }
      confirmAct(`Switch ${state.group} back to blue?`).then((yes) => { if (yes) canaryAct("rollback"); });
    });
  }
  for (const b of document.querySelectorAll("#canary button")) {
    b.addEventListener("click", () => {
      if (b.dataset.act !== "abort") { canaryAct(b.dataset.act); return; }
      confirmAct(`Abort the canary of ${state.group}?`).then((yes) => { if (yes) canaryAct("abort"); });
    });
  }
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
