// faultline's web UI: plain JS over the JSON API (docs/web.md); charts
// are drawn as SVG here, nothing is loaded from elsewhere.
"use strict";

const KINDS = ["ib_link_degraded", "ib_link_down", "ib_link_flapping", "gpu_xid", "gpu_ecc",
  "gpu_thermal_throttle", "gpu_nvlink_errors", "storage_latency", "nfs_latency", "lustre_latency", "node_lost", "straggler", "job_slowdown",
  "inference_latency", "interference", "gpu_power_throttle", "collective_hang", "app_xid", "nvswitch_sxid"];
const AGES = { "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3, "30d": 30 * 86400e3, "1y": 365 * 86400e3 };
const main = document.getElementById("main");
const params = new URLSearchParams(location.search);

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function when(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : ""; }
async function api(path) {
  const r = await fetch(path);
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}
function fail(e) { main.innerHTML = `<p class="muted">${esc(e.message || e)}</p>`; }

// Live updates: `onUpdate` runs (debounced) after each incident update.
function live(onUpdate) {
  const badge = document.getElementById("live");
  const es = new EventSource("/api/stream");
  let timer = null;
  const kick = (u) => { clearTimeout(timer); timer = setTimeout(() => onUpdate(u), 250); };
  es.onopen = () => { badge.className = "live on"; };
  es.onerror = () => { badge.className = "live off"; };
  es.addEventListener("incident", ev => kick(JSON.parse(ev.data)));
  es.addEventListener("lagged", () => kick(null));
}

// Severity as a badge (docs/alerting.md: the severity table); empty for
// incidents stored before severities were rated.
function sev(s) { return s ? `<span class="sev sev-${esc(s)}">${esc(s)}</span>` : `<span class="muted">-</span>`; }

function incidentRows(rows, fresh, acked = new Set()) {
  if (!rows.length) return `<p class="muted" id="empty">No incidents match.</p>`;
  // The cluster column only where some incident names one (a fleet view).
  const clusters = rows.some(r => r.cluster);
  return `<table id="incidents"><thead><tr><th>opened (UTC)</th><th>state</th><th>severity</th><th>kind</th>
    ${clusters ? "<th>cluster</th>" : ""}<th>entity</th><th>confidence</th><th>jobs</th><th>evidence</th></tr></thead><tbody>` +
    rows.map(r => `<tr class="${esc(r.state)}${fresh.has(r.id) ? " fresh" : ""}" data-id="${esc(r.id)}" data-kind="${esc(r.kind)}" data-severity="${esc(r.severity || "")}">
      <td><a href="/incident?id=${encodeURIComponent(r.id)}">${when(r.opened_ms)}</a></td>
      <td>${esc(r.state)}${acked.has(r.id) ? ` <span class="muted" title="acknowledged: notifications silenced">acked</span>` : ""}</td>
      <td>${sev(r.severity)}</td><td>${esc(r.kind)}</td>
      ${clusters ? `<td class="cluster">${esc(r.cluster || "")}</td>` : ""}
      <td><a href="/entity?name=${encodeURIComponent(r.entity)}">${esc(r.entity)}</a></td>
      <td>${r.confidence.toFixed(2)}</td>
      <td>${r.jobs.map(j => `<a href="/entity?name=${encodeURIComponent(j)}">${esc(j)}</a>`).join(", ")}</td>
      <td class="muted">${esc(r.evidence[0] || "")}</td></tr>`).join("") + `</tbody></table>`;
}

// The incident list with its filters (kept in the URL).
async function listPage() {
  const f = (k) => params.get(k) || "";
  main.innerHTML = `<form class="filters" id="filters">
    <label>kind<select name="kind"><option value="">any</option>${KINDS.map(k =>
      `<option${k === f("kind") ? " selected" : ""}>${k}</option>`).join("")}</select></label>
    <label>severity<select name="severity">${["", "critical", "warning", "info"].map(s =>
      `<option value="${s}"${s === f("severity") ? " selected" : ""}>${s || "any"}</option>`).join("")}</select></label>
    <label>cluster<input name="cluster" value="${esc(f("cluster"))}"></label>
    <label>host<input name="host" value="${esc(f("host"))}" placeholder="n017"></label>
    <label>job<input name="job" value="${esc(f("job"))}"></label>
    <label>entity<input name="entity" value="${esc(f("entity"))}"></label>
    <label>state<select name="state">${["", "open", "resolved"].map(s =>
      `<option value="${s}"${s === f("state") ? " selected" : ""}>${s || "any"}</option>`).join("")}</select></label>
    <label>opened within<select name="since">${["", ...Object.keys(AGES)].map(s =>
      `<option value="${s}"${s === f("since") ? " selected" : ""}>${s || "any time"}</option>`).join("")}</select></label>
    <label>&nbsp;<button type="submit">Filter</button></label></form><div id="list"></div>`;
  const form = document.getElementById("filters");
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    history.replaceState(null, "", "/?" + q);
    for (const k of ["kind", "severity", "cluster", "host", "job", "entity", "state", "since"]) params.delete(k);
    for (const [k, v] of q) params.set(k, v);
    load(new Set());
  });
  let known = null;
  async function load(fresh) {
    const q = new URLSearchParams();
    for (const k of ["kind", "severity", "cluster", "host", "job", "entity", "state"]) if (f(k)) q.set(k, f(k));
    if (AGES[f("since")]) q.set("since_ms", String(Date.now() - AGES[f("since")]));
    try {
      const j = await api("/api/incidents?" + q);
      const acked = new Set((await api("/api/acks")).acks.map(a => a.incident_id));
      const ids = new Set(j.incidents.map(r => r.id));
      if (known) for (const id of ids) if (!known.has(id)) fresh.add(id);
      known = ids;
      document.getElementById("list").innerHTML = incidentRows(j.incidents, fresh, acked);
    } catch (e) { document.getElementById("list").innerHTML = `<p class="muted">${esc(e.message)}</p>`; }
  }
  await load(new Set());
  live(() => load(new Set()));
}

// One SVG chart of a panel over [from, to) with vertical markers.
function chart(p, from, to, markers) {
  const W = 1000, H = 150, L = 70, B = 18;
  const pts = p.points;
  const band = p.band || null;
  const vals = pts.flatMap(x => [x.min, x.max]);
  if (band) for (const x of [...band.p10, ...band.p90, ...band.median]) vals.push(x.mean);
  const pos = vals.filter(v => v > 0);
  const logy = p.signal === "ber" && pos.length > 0;
  // Log scale for BER; zeros sit a decade below the smallest positive value.
  const floor = logy ? Math.min(...pos) / 10 : 0;
  const tf = v => logy ? Math.log10(Math.max(v, floor)) : v;
  let lo = Math.min(...vals.map(tf)), hi = Math.max(...vals.map(tf));
  if (!isFinite(lo)) { lo = 0; hi = 1; }
  if (hi === lo) { hi = lo + 1; lo = lo - (logy ? 1 : 0); }
  const x = t => L + (W - L - 5) * (t - from) / Math.max(1, to - from);
  const y = v => 5 + (H - B - 10) * (1 - (tf(v) - lo) / (hi - lo));
  const line = (a, k) => a.map((q, i) => `${i ? "L" : "M"}${x(q.ts).toFixed(1)},${y(q[k]).toFixed(1)}`).join("");
  const area = (top, bot, kt, kb) => top.length ? line(top, kt) + bot.slice().reverse()
    .map(q => `L${x(q.ts).toFixed(1)},${y(q[kb]).toFixed(1)}`).join("") + "Z" : "";
  const fmt = v => logy ? "1e" + v.toFixed(1) : (Math.abs(v) >= 1e5 || (Math.abs(v) < 0.001 && v !== 0) ? v.toExponential(2) : String(Number(v.toPrecision(4))));
  let s = `<svg class="chart" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" data-entity="${esc(p.entity)}" data-signal="${esc(p.signal)}">`;
  if (band && band.p10.length) {
    s += `<path class="band" d="${area(band.p90, band.p10, "mean", "mean")}"/>`;
    s += `<path class="median" d="${line(band.median, "mean")}"/>`;
  }
  if (pts.length) {
    s += `<path class="range" d="${area(pts, pts, "max", "min")}"/>`;
    s += `<path class="line" d="${line(pts, "mean")}"/>`;
  }
  for (const m of markers) if (m >= from && m <= to) s += `<line class="marker" x1="${x(m)}" x2="${x(m)}" y1="0" y2="${H - B}"/>`;
  s += `<text class="axis" x="2" y="12">${fmt(hi)}</text><text class="axis" x="2" y="${H - B}">${fmt(lo)}</text>`;
  s += `<text class="axis" x="${L}" y="${H - 4}">${when(from)}</text><text class="axis" x="${W - 5}" y="${H - 4}" text-anchor="end">${when(to)}</text></svg>`;
  return s;
}

function panelsHtml(panels, from, to, markers) {
  if (!panels.length) return `<p class="muted">No series recorded for this time range.</p>`;
  return panels.map(p => `<div class="panel" data-entity="${esc(p.entity)}" data-signal="${esc(p.signal)}">
    <h3><a href="/entity?name=${encodeURIComponent(p.entity)}">${esc(p.entity)}</a> · ${esc(p.signal)}
    <span class="muted">(${p.res ? p.res / 60000 + " min" : "per window"}, ${p.points.length} points)</span></h3>
    <div class="legend"><span class="s">— ${esc(p.signal)} (mean, min–max)</span>${p.band ?
      `<span class="b">▒ ${esc(p.band.entity)} band p10–p90, - - median</span>` : ""}</div>
    ${chart(p, from, to, markers)}</div>`).join("");
}

async function incidentPage() {
  const id = params.get("id") || "";
  const draw = async () => {
    const j = await api("/api/incidents/" + encodeURIComponent(id));
    const i = j.incident;
    const markers = [i.opened_ms, i.resolved_ms].filter(Boolean);
    main.innerHTML = `<h2 id="title">${esc(i.kind)} on <a href="/entity?name=${encodeURIComponent(i.entity)}">${esc(i.entity)}</a>
      <span class="muted">${esc(i.state)}</span> <span id="severity">${sev(i.severity)}</span></h2>
      <p>incident <code>${esc(i.id)}</code>${i.cluster ? ` · cluster <span id="cluster">${esc(i.cluster)}</span>` : ""} · opened ${when(i.opened_ms)} UTC${i.resolved_ms ? " · resolved " + when(i.resolved_ms) + " UTC" : ""}
      · confidence ${i.confidence.toFixed(2)} · jobs: <span id="jobs">${i.jobs.map(x =>
        `<a href="/entity?name=${encodeURIComponent(x)}">${esc(x)}</a>`).join(", ") || "none"}</span></p>
      ${ackHtml(i, j.ack, j.acks || [])}
      <h3>Timeline</h3><div id="panels">${panelsHtml(j.panels, j.from, j.to, markers)}</div>
      <h3>Evidence</h3><ul class="evidence" id="evidence">${i.evidence.map(e => `<li>${esc(e)}</li>`).join("")}</ul>
      <h3>Runbook</h3><div class="runbook" id="runbook">${esc(i.runbook)}</div>
      <h3>Updates</h3><table><tr><th>time (UTC)</th><th>state</th><th>confidence</th><th>evidence</th></tr>${j.updates.map(u =>
        `<tr><td>${when(u.ts_ms)}</td><td>${esc(u.state)}</td><td>${u.confidence.toFixed(2)}</td><td class="muted">${esc(u.evidence.join("; "))}</td></tr>`).join("")}</table>`;
  };
  // Acknowledge / clear with the operator token (kept for this tab only).
  main.addEventListener("submit", async ev => {
    if (ev.target.id !== "ackform") return;
    ev.preventDefault();
    const f = new FormData(ev.target);
    const token = f.get("token") || sessionStorage.getItem("faultline-token") || "";
    sessionStorage.setItem("faultline-token", token);
    const clear = ev.submitter && ev.submitter.name === "clear";
    const body = clear ? { by: f.get("by"), why: f.get("why") || "" }
      : { by: f.get("by"), why: f.get("why"), for_s: Number(f.get("for_s") || 0) };
    const r = await fetch(`/api/incidents/${encodeURIComponent(id)}/ack`, {
      method: clear ? "DELETE" : "POST", body: JSON.stringify(body),
      headers: { "content-type": "application/json", "authorization": "Bearer " + token } });
    const j = await r.json().catch(() => ({}));
    const msg = document.getElementById("ackmsg");
    if (!r.ok) { msg.textContent = j.error || r.statusText; return; }
    draw().catch(fail);
  });
  try { await draw(); } catch (e) { return fail(e); }
  live(u => { if (!u || u.incident_id === id) draw().catch(fail); });
}

// The acknowledgement in force, its history, and the form to set or clear it.
function ackHtml(i, ack, acks) {
  const now = ack ? `<p class="ack" id="ack">Acknowledged by <b>${esc(ack.by)}</b>: ${esc(ack.why)} · since ${when(ack.ts_ms)} UTC
    · ${ack.until_ms ? "until " + when(ack.until_ms) + " UTC" : "until it resolves"} · notifications silenced</p>` : "";
  const past = acks.length ? `<table class="acks"><tr><th>time (UTC)</th><th>action</th><th>by</th><th>why</th></tr>${acks.map(a =>
    `<tr><td>${when(a.ts_ms)}</td><td>${esc(a.action)}</td><td>${esc(a.by)}</td><td>${esc(a.why)}</td></tr>`).join("")}</table>` : "";
  const form = i.state === "open" ? `<form id="ackform" class="filters">
    <label>by<input name="by" required maxlength="64"></label>
    <label>why<input name="why" maxlength="512" ${ack ? "" : "required"}></label>
    <label>for<select name="for_s"><option value="0">until resolved</option><option value="3600">1 h</option>
      <option value="14400">4 h</option><option value="86400">1 day</option></select></label>
    <label>operator token<input name="token" type="password" autocomplete="off"></label>
    <button name="ack">${ack ? "re-acknowledge" : "acknowledge"}</button>${ack ? `<button name="clear">clear</button>` : ""}
    <span class="muted" id="ackmsg"></span></form>` : "";
  return now || past || form ? `<h3>Acknowledgement</h3>${now}${form}${past}` : "";
}

async function entityPage() {
  const name = params.get("name") || "";
  try {
    const j = await api("/api/entity?name=" + encodeURIComponent(name));
    const parts = j.entities.length ? `<p>Parts: ${j.entities.map(e =>
      `<a href="/entity?name=${encodeURIComponent(e)}">${esc(e)}</a>`).join(" · ")}</p>` : "";
    main.innerHTML = `<h2>${esc(j.entity)}</h2>${parts}<h3>Series (last hour recorded)</h3>${panelsHtml(j.panels, j.from, j.to,
      j.incidents.map(i => i.opened_ms))}<h3>Incidents of this entity and its parts</h3>${incidentRows(j.incidents, new Set())}
      ${j.affected_by.length ? `<h3>Incidents affecting it</h3>${incidentRows(j.affected_by, new Set())}` : ""}`;
  } catch (e) { fail(e); }
}

async function fleetPage() {
  const since = params.get("since") || "30d";
  try {
    const j = await api(`/api/offenders?since_ms=${Date.now() - (AGES[since] || AGES["30d"])}&min=${params.get("min") || 2}`);
    main.innerHTML = `<h2>Recurring offenders <span class="muted">(${esc(since)}, at least ${esc(params.get("min") || 2)} incidents)</span></h2>
      <p class="muted">Entities with repeated incidents, most first: candidates for replacement before they break a run.</p>` +
      (j.offenders.length ? `<table id="offenders"><tr><th>entity</th><th>incidents</th><th>kinds</th><th>time in incident</th><th>first</th><th>last</th></tr>` +
        j.offenders.map(o => `<tr><td><a href="/entity?name=${encodeURIComponent(o.entity)}">${esc(o.entity)}</a></td><td>${o.incidents}</td>
        <td>${esc(o.kinds.join(", "))}</td><td>${Math.round(o.open_s)} s</td><td>${when(o.first_ms)}</td><td>${when(o.last_ms)}</td></tr>`).join("") +
        `</table>` : `<p class="muted">No entity has repeated incidents in this period.</p>`);
  } catch (e) { fail(e); }
}

({ "/": listPage, "/incident": incidentPage, "/entity": entityPage, "/fleet": fleetPage }[location.pathname] || listPage)();
