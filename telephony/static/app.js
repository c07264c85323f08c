// parley's call page: one WebRTC call to the server that served this page (no build step).
//
// Signaling is pipecat's SmallWebRTC: POST /api/offer {sdp, type, pc_id, restart_pc} returns the
// answer; candidates found after the offer was posted go by PATCH /api/offer. The data channel
// carries pipecat's "ping" keep-alive and the caller's commands out:
//   {type: "hangup"}                 the caller hung up
//   {type: "dtmf", digit: "1"}       a key of the keypad (0-9, *, #), as a phone's DTMF
// and parley's messages in:
//   {type: "transcript", role: "user"|"agent", text, final, turn, interrupted}
//   {type: "latency", turn, user_text, latency_ms: {vad_stop, stt_final, first_text, ...}}
//   {type: "call", state: "started"|"ended", call_id, reason}
//   {type: "signalling", message: {type: "peerLeft"}}      (the agent ended the call)
// window.parley exposes the call's state for tests and for the curious.
//
// The microphone goes through the browser's echo cancellation, noise suppression and gain
// control, as every calling page's does: on a laptop's speakers the agent would otherwise hear
// itself and cut itself off. "?audio=raw" in the page's address turns all three off (a headset,
// or a test that compares what was sent with what was heard).
"use strict";

const GATHER_WAIT_MS = 2000;   // post the offer once ICE gathering completes, or after this long
const PING_EVERY_MS = 1000;    // pipecat's keep-alive: the server drops a peer silent for ~3 s
const STATS_EVERY_MS = 250;
const LATENCY_COLUMNS = ["stt_final", "first_text", "tts_first_audio", "transport_first_byte"];

const $ = (id) => document.getElementById(id);
const RAW_AUDIO = new URLSearchParams(location.search).get("audio") === "raw";

const parley = {
  state: "idle",             // idle | connecting | live | ended | error
  pcId: null,                // the peer connection's id (signaling)
  callId: null,              // the call record's id (GET /calls/{id} on the server)
  messages: [],
  agentPeakLevel: 0,         // 0..1, the loudest agent audio heard (AnalyserNode)
  agentAudioMs: 0,           // how long the agent's audio was above the speech threshold
  inbound: { bytesReceived: 0, packetsReceived: 0, totalAudioEnergy: 0 },
  outbound: { bytesSent: 0, packetsSent: 0 },  // the microphone's RTP: 0 until capture starts
  muted: false,
  endReason: null,
  keysSent: [],              // the keypad's presses sent to the agent, in order
  selectedPair: null,        // {local, remote} addresses of the ICE pair in use
  audioProcessing: !RAW_AUDIO,  // asked for: echo cancellation, noise suppression, gain control
  micSettings: null,         // what the browser applied to the microphone (getSettings())

};
window.parley = parley;

let pc = null;
let channel = null;
let mic = null;
let audioCtx = null;
let analyser = null;
let timers = [];
let pendingCandidates = [];
let offerPosted = false;

function setStatus(state, text) {
  parley.state = state;
  const el = $("status");
  el.dataset.state = state;
  el.textContent = text;
  $("call").disabled = state === "connecting" || state === "live";
  $("mute").disabled = state !== "live" && state !== "connecting";
  $("hangup").disabled = state !== "live" && state !== "connecting";
  for (const key of document.querySelectorAll("#keypad button")) key.disabled = state !== "live";
}

// -- transcript and latency ------------------------------------------------------------------

const lines = new Map();  // "role:turn" -> the <li> still open for it

function showTranscript(msg) {
  const key = `${msg.role}:${msg.turn}`;
  let li = lines.get(key);
  // an agent message holds the turn's whole reply so far; a user final closes its line
  if (!li || (msg.role === "user" && li.dataset.final === "true")) {
    li = document.createElement("li");
    li.dataset.role = msg.role;
    li.dataset.turn = String(msg.turn);
    $("transcript").appendChild(li);
    lines.set(key, li);
  }
  li.textContent = `${msg.role === "user" ? "You" : "Agent"}: ${msg.text}`;
  li.dataset.final = String(Boolean(msg.final));
  li.dataset.interrupted = String(Boolean(msg.interrupted));
  li.scrollIntoView({ block: "nearest" });
}

function fmt(ms) {
  return typeof ms === "number" ? ms.toFixed(0) : "–";
}

function showLatency(msg) {
  const row = document.createElement("tr");
  row.dataset.turn = String(msg.turn);
  const cells = [String(msg.turn), msg.user_text || ""].concat(
    LATENCY_COLUMNS.map((name) => fmt(msg.latency_ms[name])));
  for (const text of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
  }
  $("latency").querySelector("tbody").appendChild(row);
}

function onMessage(event) {
  if (typeof event.data !== "string") return;
  let msg;
  try {
    msg = JSON.parse(event.data);
  } catch (err) {
    console.warn("non-JSON message from the server", err);
    return;
  }
  parley.messages.push(msg);
  if (msg.type === "transcript") showTranscript(msg);
  else if (msg.type === "latency") showLatency(msg);
  else if (msg.type === "call" && msg.state === "started") parley.callId = msg.call_id;
  else if (msg.type === "call" && msg.state === "ended") finish(`Call ended: ${msg.reason}.`);
  else if (msg.type === "signalling" && msg.message && msg.message.type === "peerLeft") {
    finish("The agent hung up.");
  }
}

// -- agent audio: play it, and measure it ------------------------------------------------------

function onTrack(event) {
  const stream = event.streams[0] || new MediaStream([event.track]);
  $("agent-audio").srcObject = stream;  // Chromium needs an element playing a remote stream
  if (audioCtx) {
    analyser = audioCtx.createAnalyser();
    analyser.fftSize = 1024;
    audioCtx.createMediaStreamSource(stream).connect(analyser);
  }
}

function measure() {
  if (analyser) {
    const samples = new Float32Array(analyser.fftSize);
    analyser.getFloatTimeDomainData(samples);
    let peak = 0;
    for (const s of samples) peak = Math.max(peak, Math.abs(s));
    parley.agentPeakLevel = Math.max(parley.agentPeakLevel, peak);
    if (peak > 0.02) parley.agentAudioMs += STATS_EVERY_MS;
    $("level").style.width = `${Math.min(100, peak * 200).toFixed(0)}%`;
  }
  if (pc) {
    pc.getStats().then((report) => {
      report.forEach((s) => {
        if (s.type === "candidate-pair" && s.nominated && s.state === "succeeded") {
          const local = report.get(s.localCandidateId);
          const remote = report.get(s.remoteCandidateId);
          parley.selectedPair = {
            local: local && (local.address || local.ip), remote: remote && (remote.address || remote.ip),
          };
        } else if (s.type === "inbound-rtp" && s.kind === "audio") {
          parley.inbound = {
            bytesReceived: s.bytesReceived || 0,
            packetsReceived: s.packetsReceived || 0,
            totalAudioEnergy: s.totalAudioEnergy || 0,  // Chromium only
          };
        } else if (s.type === "outbound-rtp" && s.kind === "audio") {
          parley.outbound = { bytesSent: s.bytesSent || 0, packetsSent: s.packetsSent || 0 };
        }
      });
    }).catch(() => {});
  }
}

// -- the call ------------------------------------------------------------------------------

function gathered(peer) {
  if (peer.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      if (peer.iceGatheringState === "complete") {
        peer.removeEventListener("icegatheringstatechange", done);
        resolve();
      }
    };
    peer.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, GATHER_WAIT_MS);
  });
}

async function trickle(candidates) {
  if (!candidates.length || !parley.pcId) return;
  const body = {
    pc_id: parley.pcId,
    candidates: candidates.map((c) => ({
      candidate: c.candidate, sdp_mid: c.sdpMid, sdp_mline_index: c.sdpMLineIndex,
    })),
  };
  const resp = await fetch("/api/offer", {
    method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  if (!resp.ok) console.warn("candidate patch refused", resp.status);
}

async function call() {
  setStatus("connecting", "Asking for your microphone…");
  parley.messages = [];
  parley.endReason = null;
  parley.pcId = null;
  parley.callId = null;
  lines.clear();
  $("transcript").replaceChildren();
  $("latency").querySelector("tbody").replaceChildren();
  try {
    // The user's click allows audio to play; start the meter's context inside it.
    audioCtx = new AudioContext();
    const processing = !RAW_AUDIO;
    mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: processing, noiseSuppression: processing, autoGainControl: processing },
    });
    const applied = mic.getAudioTracks()[0]?.getSettings() ?? {};
    parley.micSettings = { echoCancellation: applied.echoCancellation, noiseSuppression: applied.noiseSuppression,
                           autoGainControl: applied.autoGainControl };
    setStatus("connecting", "Connecting…");
    pc = new RTCPeerConnection({ iceServers: [] });
    for (const track of mic.getAudioTracks()) pc.addTrack(track, mic);  // audio is transceiver 0
    channel = pc.createDataChannel("parley", { ordered: true });
    channel.onmessage = onMessage;
    channel.onopen = () => {
      timers.push(setInterval(() => {
        if (channel && channel.readyState === "open") channel.send(`ping: ${Date.now()}`);
      }, PING_EVERY_MS));
    };
    pc.ontrack = onTrack;
    offerPosted = false;
    pendingCandidates = [];
    pc.onicecandidate = (event) => {
      if (!event.candidate || !event.candidate.candidate || !offerPosted) return;
      pendingCandidates.push(event.candidate);
      if (parley.pcId) trickle(pendingCandidates.splice(0)).catch(console.warn);
    };
    pc.onconnectionstatechange = () => {
      if (!pc) return;
      if (pc.connectionState === "connected") setStatus("live", "Connected: speak now.");
      else if (pc.connectionState === "failed") finish("The connection failed.", "error");
    };
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    offerPosted = true;
    const resp = await fetch("/api/offer", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sdp: pc.localDescription.sdp, type: "offer", pc_id: null, restart_pc: false }),
    });
    if (!resp.ok) throw new Error(`the server refused the call (${resp.status}: ${(await resp.text()).trim()})`);
    const answer = await resp.json();
    parley.pcId = answer.pc_id;
    await pc.setRemoteDescription({ type: answer.type, sdp: answer.sdp });
    await trickle(pendingCandidates.splice(0));
    timers.push(setInterval(measure, STATS_EVERY_MS));
  } catch (err) {
    console.error(err);
    finish(`Could not call: ${err.message || err}`, "error");
  }
}

function toggleMute() {
  if (!mic) return;
  parley.muted = !parley.muted;
  for (const track of mic.getAudioTracks()) track.enabled = !parley.muted;
  $("mute").setAttribute("aria-pressed", String(parley.muted));
  $("mute").textContent = parley.muted ? "Unmute" : "Mute";
}

const KEYPAD = "0123456789*#";

function press(digit) {
  if (parley.state !== "live" || !KEYPAD.includes(digit)) return;
  if (!channel || channel.readyState !== "open") return;
  channel.send(JSON.stringify({ type: "dtmf", digit }));
  parley.keysSent.push(digit);
  const key = document.querySelector(`#keypad button[data-digit="${digit}"]`);
  if (key) {
    key.classList.add("pressed");
    setTimeout(() => key.classList.remove("pressed"), 150);
  }
}

function hangUp() {
  if (channel && channel.readyState === "open") channel.send(JSON.stringify({ type: "hangup" }));
  finish("You hung up.");
}

function finish(text, state = "ended") {
  if (parley.state === "ended" || parley.state === "error") return;
  parley.endReason = text;
  for (const t of timers) clearInterval(t);
  timers = [];
  const peer = pc;
  pc = null;
  // let a hang-up message leave before the connection closes
  setTimeout(() => {
    if (channel) channel.close();
    if (peer) peer.close();
    channel = null;
  }, 100);
  if (mic) for (const track of mic.getTracks()) track.stop();
  mic = null;
  if (audioCtx) audioCtx.close().catch(() => {});
  audioCtx = null;
  analyser = null;
  parley.muted = false;
  $("mute").setAttribute("aria-pressed", "false");
  $("mute").textContent = "Mute";
  $("level").style.width = "0";
  setStatus(state, text);
}

window.addEventListener("DOMContentLoaded", () => {
  $("call").addEventListener("click", () => { call(); });
  $("mute").addEventListener("click", toggleMute);
  $("hangup").addEventListener("click", hangUp);
  for (const key of document.querySelectorAll("#keypad button")) {
    key.disabled = true;
    key.addEventListener("click", () => press(key.dataset.digit));
  }
  window.addEventListener("keydown", (event) => {
    if (event.key.length === 1 && !event.ctrlKey && !event.metaKey && !event.altKey) press(event.key);
  });
  window.addEventListener("pagehide", () => { if (pc) hangUp(); });
});
