// parley's call pages (/ui/calls, /ui/calls/{id}, the login form): no build step, nothing fetched
// but this server's JSON. Every text from a call record reaches the page through textContent
// (el() below), never as HTML. window.parleyCall exposes the loaded call for tests.
"use strict";

const $ = (id) => document.getElementById(id);

// The latency marks a turn record holds, in the order they happen (ms after the end of speech).
const STAGES = [
  ["vad_stop", "VAD stop"],
  ["stt_final", "final transcript"],
  ["first_text", "first LLM text"],
  ["tts_first_audio", "first TTS audio"],
  ["transport_first_byte", "first byte on the wire"],
];

// An element with attributes (data-* through dataset) and children: strings become text nodes.
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "className") node.className = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function utc(seconds) {
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19);
}

function clock(seconds) {
  const s = Math.max(0, seconds);
  return `${Math.floor(s / 60)}:${(s % 60).toFixed(1).padStart(4, "0")}`;
}

function setStatus(text, state = "") {
  const status = $("status");
  status.textContent = text;
  status.dataset.state = state;
}

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (response.status === 401) throw new Error("not logged in: reload the page to log in");
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

// -- the login form --------------------------------------------------------------------------

function loginPage() {
  const here = location.pathname + location.search;
  if (here.startsWith("/ui/")) $("next").value = here.replace(/([?&])token=[^&]*&?/, "$1").replace(/[?&]$/, "");
}

// -- the list ----------------------------------------------------------------------------------

async function callsPage() {
  const form = $("search");
  const query = new URLSearchParams(location.search);
  for (const name of ["from", "to", "number", "outcome"]) {
    if (query.has(name)) form.elements[name].value = query.get(name);
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = new URLSearchParams();
    for (const name of ["from", "to", "number", "outcome"]) {
      const value = form.elements[name].value.trim();
      if (value) wanted.set(name, value);
    }
    location.search = wanted.toString();
  });
  setStatus("Loading…");
  let data;
  try {
    data = await getJson(`/ui/api/calls?${query.toString()}`);
  } catch (error) {
    setStatus(`Cannot list the calls: ${error.message}`, "error");
    return;
  }
  window.parleyCalls = data;
  const body = $("calls").tBodies[0];
  for (const call of data.calls) {
    const link = el("a", { href: `/ui/calls/${encodeURIComponent(call.call_sid)}` }, call.call_sid);
    const outcome = call.dial_outcome && call.dial_outcome !== call.outcome
      ? `${call.outcome} (${call.dial_outcome})` : call.outcome;
    body.append(el("tr", { dataset: { sid: call.call_sid, outcome: call.outcome } },
      el("td", {}, utc(call.started_at)), el("td", {}, link), el("td", {}, call.from || ""),
      el("td", {}, call.to || ""), el("td", {}, call.transport),
      el("td", {}, call.duration_s === null ? "live" : clock(call.duration_s)),
      el("td", {}, String(call.turns)), el("td", {}, outcome), el("td", {}, call.first_words || "")));
  }
  const more = data.more ? ` (the newest ${data.searched} calls searched)` : "";
  setStatus(data.calls.length ? `${data.calls.length} calls${more}` : `No call matches${more}.`);
}

// -- one call ----------------------------------------------------------------------------------

const parleyCall = { call: null, turns: [], duration: 0 };
window.parleyCall = parleyCall;

function callPage() {
  const sid = decodeURIComponent(location.pathname.split("/")[3] || "");
  $("title").textContent = `Call ${sid}`;
  getJson(`/ui/api/calls/${encodeURIComponent(sid)}`).then(showCall).catch((error) => {
    setStatus(`Cannot show this call: ${error.message}`, "error");
  });
}

// Where each turn and each side's speech sits on the call's clock (seconds after it started).
function spans(call) {
  const items = [];
  const marks = call.marks_s || {};
  if (marks.greeting_start !== undefined) {
    items.push({ side: "agent", turn: 0, start: marks.greeting_start, end: marks.greeting_end,
      text: call.greeting_heard || call.greeting });
  }
  for (const turn of call.turns) {
    const at = turn.at_s || {};
    if (at.speech_end !== undefined) {
      items.push({ side: "caller", turn: turn.turn, start: at.speech_start ?? at.speech_end, end: at.speech_end,
        text: turn.user_text });
    }
    if (at.agent_start !== undefined) {
      items.push({ side: "agent", turn: turn.turn, start: at.agent_start, end: at.agent_end,
        text: turn.interrupted ? turn.agent_text_heard || turn.agent_text : turn.agent_text });
    }
  }
  return items;
}

function turnStart(turn) {
  const at = turn.at_s || {};
  return at.speech_start ?? at.speech_end ?? null;
}

function showCall(call) {
  parleyCall.call = call;
  const recording = call.recording || { available: false };
  const ends = [call.ended_at ? call.ended_at - call.started_at : 0];
  for (const item of spans(call)) ends.push(item.end ?? item.start);
  if (recording.available && recording.waveform) ends.push(recording.offset_s + recording.waveform.duration_s);
  parleyCall.duration = Math.max(1, ...ends);
  showSummary(call);
  showRecording(call, recording);
  showAxis(call);
  showTurns(call);
  if (call.errors.length) {
    $("errors-section").hidden = false;
    for (const error of call.errors) $("errors").append(el("li", {}, error));
  }
  setStatus(`${call.turns.length} turns`, "ready");
}

function showSummary(call) {
  const rows = [
    ["Transport", call.transport],
    ["Started (UTC)", utc(call.started_at)],
    ["Length", call.ended_at ? clock(call.ended_at - call.started_at) : "live"],
    ["Outcome", call.outcome],
    ["Ended", call.end_reason || (call.ended ? "-" : "in progress")],
  ];
  if (call.answered_by) rows.push(["Answered by", call.answered_by]);
  if (call.dial && call.dial.outcome) rows.push(["Dialled", `${call.dial.to || call.dial.target || ""}: ${call.dial.outcome}`]);
  for (const [key, value] of Object.entries(call.params || {})) rows.push([key, value]);
  for (const [key, value] of rows) $("summary").append(el("dt", {}, key), el("dd", {}, String(value)));
}

function showRecording(call, recording) {
  if (!recording.available) {
    const missing = $("recording-missing");
    missing.hidden = false;
    missing.textContent = `No recording: ${recording.why}.`;
    return;
  }
  $("recording").hidden = false;
  const player = $("player");
  player.src = recording.url;
  parleyCall.offset = recording.offset_s;
  if (recording.waveform) {
    $("waveform").hidden = false;
    drawWaveform(recording.waveform, recording.offset_s);
  }
  $("waveform").addEventListener("click", (event) => {  // on the call's clock, as the axis below
    const box = event.currentTarget.getBoundingClientRect();
    seek(((event.clientX - box.left) / box.width) * parleyCall.duration);
  });
  player.addEventListener("timeupdate", () => markPlaying(player.currentTime + recording.offset_s));
}

// The caller above the line, the agent below, placed on the call's clock like the axis below it
// (the recording's second 0 is at offset_s).
function drawWaveform(waveform, offset) {
  const canvas = $("waveform");
  const ctx = canvas.getContext("2d");
  const mid = canvas.height / 2;
  const colors = { caller: "#2a6fdb", agent: "#0a7a33" };
  const scale = canvas.width / parleyCall.duration;
  for (const [name, sign] of [["caller", -1], ["agent", 1]]) {
    const peaks = waveform.channels[name] || [];
    ctx.fillStyle = colors[name];
    const step = waveform.duration_s / Math.max(1, peaks.length);
    peaks.forEach((peak, i) => {
      const h = Math.max(0.5, Math.min(1, peak) * (mid - 2));
      ctx.fillRect((offset + i * step) * scale, sign < 0 ? mid - h : mid, Math.max(1, step * scale - 0.2), h);
    });
  }
  ctx.fillStyle = "#99a";
  ctx.fillRect(0, mid, canvas.width, 0.5);
}

// Play the recording from `callSeconds` on the call's clock (the recording starts at offset_s).
function seek(callSeconds) {
  seekPlayer(callSeconds - (parleyCall.offset || 0));
}

function seekPlayer(seconds) {
  const player = $("player");
  if (!player || !player.src) return;
  player.currentTime = Math.max(0, seconds);
  player.play().catch(() => {}); // autoplay may be refused; the position has moved either way
}

function percent(seconds) {
  return `${(100 * Math.max(0, seconds)) / parleyCall.duration}%`;
}

function showAxis(call) {
  const lanes = { caller: document.querySelector('.lane[data-side="caller"]'),
    agent: document.querySelector('.lane[data-side="agent"]') };
  for (const item of spans(call)) {
    const end = item.end ?? item.start;
    const span = el("button", { type: "button", className: "span", title: item.text || "",
      dataset: { turn: String(item.turn), side: item.side, startS: String(item.start) } }, item.text || "…");
    span.style.left = percent(item.start);
    span.style.width = percent(end - item.start);
    span.addEventListener("click", () => seek(item.start));
    lanes[item.side].append(span);
  }
  for (const turn of call.turns) {
    const at = turn.at_s || {};
    if (at.barge_in === undefined) continue;
    const mark = el("span", { className: "mark barge-in", title: `barge-in (turn ${turn.turn})`,
      dataset: { turn: String(turn.turn) } });
    mark.style.left = percent(at.barge_in);
    lanes.caller.append(mark);
  }
  const step = parleyCall.duration > 120 ? 30 : parleyCall.duration > 30 ? 10 : 2;
  for (let t = 0; t <= parleyCall.duration; t += step) {
    const tick = el("span", { className: "tick" }, clock(t));
    tick.style.left = percent(t);
    $("ticks").append(tick);
  }
  $("axis").append(el("span", { className: "cursor", id: "cursor" }));
}

function latencyCell(turn) {
  const latency = turn.latency_ms || {};
  const cell = el("td", { className: "latency" });
  const bar = el("div", { className: "bar" });
  const list = el("dl");
  const missing = [];
  const total = Math.max(1, ...STAGES.map(([key]) => latency[key] ?? 0));
  let previous = 0;
  for (const [key, label] of STAGES) {
    const ms = latency[key];
    if (ms === null || ms === undefined) {
      missing.push(label);
      continue;
    }
    const part = el("span", { className: "stage", title: `${label}: ${ms.toFixed(0)} ms`, dataset: { stage: key } });
    part.style.width = `${(100 * Math.max(0, ms - previous)) / total}%`;
    bar.append(part);
    previous = Math.max(previous, ms);
    list.append(el("dt", {}, label), el("dd", { dataset: { stage: key } }, `${ms.toFixed(0)} ms`));
  }
  cell.append(bar, list);
  if (missing.length) cell.append(el("p", { className: "missing" }, `not recorded: ${missing.join(", ")}`));
  return cell;
}

function eventsCell(turn) {
  const list = el("ul", { className: "events" });
  for (const call of turn.tool_calls || []) {
    const outcome = call.error !== undefined && call.error !== null
      ? `error: ${call.error}` : JSON.stringify(call.result ?? null);
    const ms = typeof call.duration_ms === "number" ? ` [${call.duration_ms.toFixed(0)} ms]` : "";
    list.append(el("li", { className: "tool", dataset: { name: String(call.name) } },
      el("code", {}, `${call.name}(${JSON.stringify(call.arguments ?? {})})`), ` → ${outcome}${ms}`));
  }
  for (const event of turn.events || []) {
    const data = event.data || {};
    let text = `${event.kind} ${JSON.stringify(data)}`;
    if (event.kind === "slot") text = `slot ${data.name} = ${JSON.stringify(data.value)}`;
    if (event.kind === "transfer") text = `transfer (${data.kind}) to ${data.target}${data.reason ? `: ${data.reason}` : ""}`;
    list.append(el("li", { className: "event", dataset: { kind: String(event.kind) } }, text));
  }
  return el("td", {}, list);
}

function showTurns(call) {
  const body = $("turns").tBodies[0];
  for (const turn of call.turns) {
    const start = turnStart(turn);
    const agent = el("td", { className: "agent-said" }, turn.agent_text);
    if (turn.interrupted) {
      agent.append(el("span", { className: "badge" }, "barge-in"));
      if (turn.agent_text_heard !== turn.agent_text) {
        agent.append(el("div", { className: "heard" }, `caller heard: ${turn.agent_text_heard || "nothing"}`));
      }
    }
    const row = el("tr", { className: "turn", tabindex: "0",
      dataset: { turn: String(turn.turn), startS: start === null ? "" : String(start),
        interrupted: String(Boolean(turn.interrupted)) } },
      el("td", {}, String(turn.turn)), el("td", {}, start === null ? "-" : clock(start)),
      el("td", { className: "caller-said" }, turn.user_text), agent, latencyCell(turn), eventsCell(turn));
    if (start !== null) {
      row.addEventListener("click", () => seek(start));
      row.addEventListener("keydown", (event) => { if (event.key === "Enter") seek(start); });
    }
    body.append(row);
    parleyCall.turns.push({ turn: turn.turn, start });
  }
}

function markPlaying(callSeconds) {
  const cursor = $("cursor");
  // the axis box: the lanes' 4rem of names, then the call's length over the rest
  if (cursor) cursor.style.left = `calc(4rem + (100% - 4rem) * ${Math.max(0, callSeconds) / parleyCall.duration})`;
  let current = null;
  for (const turn of parleyCall.turns) if (turn.start !== null && turn.start <= callSeconds) current = turn.turn;
  for (const row of document.querySelectorAll("#turns tr.turn")) {
    row.classList.toggle("playing", row.dataset.turn === String(current));
  }
}

const pages = { login: loginPage, calls: callsPage, call: callPage };
pages[document.body.dataset.page]?.();
