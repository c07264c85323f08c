"""Voice-to-voice latency over Twilio, WebRTC, SIP and Genesys, one server, one run; then a mixed load.

Question: from the end of the caller's speech to the first agent audio the caller receives
(``v2v_ms``), how do the three ways into parley compare on the same server, agent and pipeline,
and does a mixed load of concurrent calls over all three lose audio?

One real ``parley serve --agent echo --sip-port P`` process on loopback. Scripted callers, all
speaking flite's voice in real time and measuring on their own clock:

- Twilio: ``harness.callers.twilio.run_call`` (Media Streams over a WebSocket, 8 kHz mu-law);
- WebRTC: ``harness.callers.webrtc.place_call`` (aiortc, Opus, 16 kHz microphone); that client
  says one clip per call, so a WebRTC "call of n turns" is n one-turn calls, one after another;
  it speaks ``--webrtc-lead-s`` after connecting, once the greeting has played;
- SIP: ``harness.callers.sip.place_sip_call`` (UDP, RTP PCMU 20 ms);
- Genesys: ``harness.callers.genesys.run_genesys_call`` (Audio Connector, AudioHook "2": signed
  upgrade, PCMU in 200 ms binary messages). The mixed load keeps to the first three unless
  ``--mixed-transports`` names it (the figures in RESULTS.md were measured on those three).

The mixed load runs twice (``--engine-procs both``): against a server that runs its recognizer and
voice in worker processes (``parley serve``'s default), then against one that runs them on threads
of its own process, the baseline (keys prefixed ``inproc_``); ``server_cpu_cores_mixed`` is the CPU
the server and its engine processes used meanwhile, ``machine_cpu_busy_mixed`` the fraction of the
machine's CPU time that was busy (all processes; 1.0: every core saturated) and
``other_cpu_cores_mixed`` the cores used by everything else (the callers, other work). The mixed
load's callers run in one process per transport (``--caller-procs 0``: all in this one), each with a
probe of its own event loop's lateness (``mixed*_caller_loop_lag_ms_*``): a caller whose loop runs
late measures the server as slower than it is.

Phase 1: ``--turns`` turns per transport, calls alternating between transports so machine noise
hits all alike (``--mixed-only`` skips it). Phase 2: ``--mixed`` calls at once, split round-robin
over the three transports, ``--mixed-turns`` turns each. ``--stt ssm`` runs the server with the
SSM recogniser (all calls batched through one BatchRunner) instead of pocketsphinx.

Dropped audio, per transport, as the server counts it (:mod:`telephony.audio_meter`; summed from
each call's record): ``frames_in_lost`` (caller frames that never reached the pipeline: Twilio
``chunk`` gaps, gaps in the RTP timestamps of the Opus frames aiortc decoded, SIP jitter-buffer
concealment and queue drops), ``frames_in_late`` (60 ms or more behind the sender's clock),
``frames_out_underrun`` (20 ms slots inside an agent utterance with no audio to send) and
``frames_out_late`` (sent a frame or more after their slot). ``frames_dropped`` = in_lost +
out_underrun; ``frames_late`` = in_late + out_late; ``/metrics`` totals are read back at the end
as a cross-check. SIP also reports what its caller saw: RTP sequence gaps and packets more than
60 ms behind the talkspurt clock.

A turn where the caller talked over the agent (the greeting was late under load, or a reply was
still playing: Twilio ``barged_in``/``clear``, SIP energy during the caller's speech, WebRTC the
greeting's final transcript after the caller started) measures nothing sure: ``v2v_ms_p*`` leave
it out, ``overlapped_turns`` counts it, ``v2v_ms_p50_incl_overlapped`` shows what it would do.
The Twilio and SIP callers wait up to 10 s for a greeting; the WebRTC client cannot wait for
one, it speaks after a fixed lead (``--webrtc-lead-s``, ``--mixed-webrtc-lead-s``).
Prints one JSON line.

    .venv/bin/python benchmarks/bench_transports.py            # 6 turns each, 16 mixed calls
    .venv/bin/python benchmarks/bench_transports.py --quick    # 3 turns each, 3 mixed calls
    .venv/bin/python benchmarks/bench_transports.py --mixed-only --stt ssm   # 16 mixed calls, SSM STT
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import os
import random
import re
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from common import git_sha, percentiles as pct  # noqa: E402

from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.flite import synthesize_flite  # noqa: E402
from pipeline.audio.g711 import resample  # noqa: E402
from pipeline.audio.wav import trim_silence  # noqa: E402
from pipeline.gc_pauses import freeze_startup_heap  # noqa: E402
from harness.callers.genesys import GenesysCallerConfig, run_genesys_call  # noqa: E402
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call  # noqa: E402
from harness.errors import CallerError  # noqa: E402
from telephony.loop_lag import LoopLagProbe  # noqa: E402
from harness.callers.sip import place_sip_call  # noqa: E402
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature  # noqa: E402
from telephony.webrtc import ice  # noqa: E402
from harness.callers.webrtc import place_call  # noqa: E402

TOKEN = "bench-token-" + "0" * 20
GENESYS_KEY, GENESYS_SECRET = "bench-genesys-key", b"bench-genesys-client-secret-0123456789"
FRAME_KEYS = ("frames_in", "frames_in_lost", "frames_in_late", "frames_out", "frames_out_underrun", "frames_out_late")
TRANSPORTS = ("twilio", "webrtc", "sip", "genesys")
MIXED_DEFAULT = ("twilio", "webrtc", "sip")   # the mixed load of the figures in RESULTS.md
GREETING_WAIT_S = 10.0  # Twilio and SIP callers: how long a greeting may take to start (load delays it)
PHRASES = [
    "hello how are you",
    "i would like to check my account",
    "can you help me please",
    "my name is john smith",
    "i want to change my address",
    "what are your opening hours",
    "i have a question about my bill",
    "yes that is right",
    "no thank you",
    "could you repeat that please",
    "i need to talk to someone",
    "my order has not arrived yet",
]


class ServerAddress:
    """Where the server listens, and its call records: all a caller process needs of it."""

    def __init__(self, port: int, sip_port: int) -> None:
        self.port, self.sip_port = port, sip_port

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def record(self, sid: str) -> dict:
        """The server's record of a call (``{}`` if it cannot be had)."""
        url = f"{self.base}/calls/{sid}"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
                for _ in range(10):  # the server may still be closing the call
                    async with http.get(url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}) as r:
                        if r.status != 200:
                            return {}
                        data = await r.json(content_type=None)
                    if data.get("ended"):
                        return data
                    await asyncio.sleep(0.3)
                return data
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return {}


class Server(ServeProcess, ServerAddress):
    """One ``parley serve --agent echo`` answering Twilio, WebRTC and SIP."""

    def __init__(self, db_dir: str, stt: str = "ssm", tts: str = "ssm", stt_warm: str = "4:1",
                 vad: str = "silero", engine_procs: int = 1):
        port, self.sip_port = free_port(), free_port(socket.SOCK_DGRAM)
        ServeProcess.__init__(self, "parley", ["-m", "deploy.cli", "serve", "--agent", "echo", "--port", str(port),
                                    "--sip-port", str(self.sip_port), "--db", str(Path(db_dir) / "calls.db"),
                                    "--log-level", "WARNING", "--stt", stt, "--tts", tts, "--stt-warm", stt_warm,
                                    "--vad", vad, "--stt-procs", str(engine_procs), "--tts-procs", str(engine_procs),
                                    "--max-calls", "10000"],  # the load is the question: no admission cap
                              port=port, log_path=Path(db_dir) / "server.log",
                              env={"TWILIO_AUTH_TOKEN": TOKEN, "PARLEY_GENESYS_API_KEY": GENESYS_KEY,
                                   "PARLEY_GENESYS_CLIENT_SECRET": base64.b64encode(GENESYS_SECRET).decode()})

    async def metrics_text(self) -> str | None:
        """The server's ``/metrics`` page, or None if it cannot be read."""
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
                async with http.get(f"{self.base}/metrics") as r:
                    return await r.text()
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def _samples(self) -> list | None:
        """The /metrics samples as a scraper reads them, or None if the page cannot be read."""
        text = await self.metrics_text()
        if text is None:
            return None
        return [smp for family in text_string_to_metric_families(text) for smp in family.samples]

    async def metrics_frames(self) -> dict[str, dict[str, int]]:
        """The audio-frame counters of ``/metrics``, by transport: {"sip": {"in": .., "in_lost": ..}}."""
        out: dict[str, dict[str, int]] = collections.defaultdict(dict)
        for smp in await self._samples() or []:
            if smp.name in ("parley_audio_frames_total", "parley_audio_frames_missed_total"):
                reason = smp.labels.get("reason")
                key = smp.labels["direction"] + (f"_{reason}" if reason else "")
                out[smp.labels["transport"]][key] = int(smp.value)
        return dict(out)

    async def loop_lag_buckets(self) -> dict[str, int]:
        """The server's event-loop lag histogram (``parley_event_loop_lag_ms``, cumulative), by
        bucket bound: {"1": n, ..., "+Inf": n}; {} if /metrics cannot be read."""
        return {_bound(smp.labels["le"]): int(smp.value) for smp in await self._samples() or []
                if smp.name == "parley_event_loop_lag_ms_bucket"}

    async def gc_pauses(self) -> dict[str, dict[str, float]]:
        """The server's garbage-collector pauses so far (``parley_gc_pause_ms``), by generation:
        {"2": {"n": .., "sum_ms": .., "over_50ms": ..}}; {} if /metrics cannot be read."""
        out: dict[str, dict[str, float]] = collections.defaultdict(dict)
        for smp in await self._samples() or []:
            gen = smp.labels.get("generation")
            if smp.name == "parley_gc_pause_ms_bucket" and _bound(smp.labels["le"]) == "50":
                out[gen]["le_50ms"] = int(smp.value)
            elif smp.name == "parley_gc_pause_ms_bucket" and smp.labels["le"] == "+Inf":
                out[gen]["n"] = int(smp.value)
            elif smp.name == "parley_gc_pause_ms_sum":
                out[gen]["sum_ms"] = float(smp.value)
        return {g: {"n": v["n"], "sum_ms": v.get("sum_ms", 0.0), "over_50ms": v["n"] - v.get("le_50ms", 0)}
                for g, v in out.items() if "n" in v}

    def warnings(self) -> tuple[int, list[str]]:
        """How many lines the server logged at WARNING or above, and the three commonest (digits
        masked, so one message about many calls counts as one)."""
        lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines()
                 if any(w in ln for w in ("WARNING", "ERROR", "CRITICAL"))]
        levels = re.compile(r"WARNING|ERROR|CRITICAL")
        kinds = collections.Counter(re.sub(r"[0-9a-f]{8,}|\d+", "#", ln[levels.search(ln).start():])[:160]  # type: ignore[union-attr]
                                    for ln in lines)
        return len(lines), [f"{n}x {k}" for k, n in kinds.most_common(12)]


def _bound(le: str) -> str:
    """A bucket bound as the figures name it: "50.0" -> "50", "2.5" stays, "+Inf" stays."""
    return le if le == "+Inf" or float(le) != int(float(le)) else str(int(float(le)))


class Voice:
    """Each phrase synthesised once: 16 kHz for WebRTC, 8 kHz for SIP (Twilio's caller runs flite itself)."""

    def __init__(self) -> None:
        self.pcm16k: dict[str, np.ndarray] = {}
        self.pcm8k: dict[str, np.ndarray] = {}

    async def prepare(self, phrases: list[str]) -> None:
        for p in phrases:
            pcm, rate = await synthesize_flite(p)
            pcm = trim_silence(pcm, rate)
            self.pcm16k[p] = resample(pcm, rate, 16000)
            self.pcm8k[p] = resample(pcm, rate, 8000)


def _empty() -> dict:
    return {"v2v": [], "v2v_overlapped": [], "unanswered": 0, "failed_calls": 0, "errors": [],
            "rtp": collections.Counter(), "server_stats": collections.Counter(),
            "stages": collections.defaultdict(list), "turns": []}


def _add_stats(out: dict, record: dict) -> None:
    for k, v in (record.get("stats") or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out["server_stats"][k] += v


async def twilio_call(server: Server, phrases: list[str], out: dict) -> None:
    report = await run_call(CallerConfig(
        url=f"ws://127.0.0.1:{server.port}/twilio/stream", auth_token=TOKEN,
        utterances=tuple(CallerUtterance(text=p) for p in phrases), timeout_s=40 + 10 * len(phrases),
        greeting_quiet_s=GREETING_WAIT_S))
    for t in report.turns:  # talked over the agent (greeting or reply still playing): v2v is suspect
        out["v2v_overlapped" if t.barged_in or t.clear_received else "v2v"].append(t.v2v_ms)
        if not (t.barged_in or t.clear_received):   # the server's stage times, after the end of speech
            out["turns"].append((t.turn, t.caller_said, t.agent_transcript or "", t.v2v_ms))
            for stage in ("vad_stop", "stt_final", "first_text", "tts_first_audio"):
                value = getattr(t.latency_ms, stage)
                if value is not None:
                    out["stages"][stage].append(value)
    out["unanswered"] += len(phrases) - len(report.turns)  # turns never spoken (the call ended early)
    _add_stats(out, await server.record(report.call_sid))


async def webrtc_call(server: Server, phrases: list[str], out: dict, voice: Voice, lead_s: float) -> None:
    for p in phrases:  # the client says one clip per call
        arrivals: list[tuple[float, dict]] = []

        def until(messages: list[dict], arrivals: list[tuple[float, dict]] = arrivals) -> bool:
            while len(arrivals) < len(messages):
                arrivals.append((time.monotonic(), messages[len(arrivals)]))
            return any(m.get("type") == "transcript" and m.get("role") == "agent" and m.get("turn") == 1
                       and m.get("final") for m in messages)

        pcm = voice.pcm16k[p]
        result = await place_call(server.base, pcm, 16000, until=until, timeout_s=40.0, lead_s=lead_s)
        greeting_done = next((t for t, m in arrivals if m.get("type") == "transcript" and m.get("role") == "agent"
                              and m.get("final") and not m.get("turn")), None)
        if result.speech_end_s is not None and greeting_done is not None and \
                greeting_done > result.speech_end_s - pcm.size / 16000:
            out["v2v_overlapped"].append(result.v2v_ms)  # spoke before the greeting's text was final
        else:
            out["v2v"].append(result.v2v_ms)
        if result.call_id:
            _add_stats(out, await server.record(result.call_id))


async def sip_call(server: Server, phrases: list[str], out: dict, voice: Voice) -> None:
    report = await place_sip_call("127.0.0.1", server.sip_port, [voice.pcm8k[p] for p in phrases],
                                  greeting_wait_s=GREETING_WAIT_S, timeout_s=40 + 10 * len(phrases))
    for t in report.turns:
        out["v2v_overlapped" if t.overlapped else "v2v"].append(t.v2v_ms)
    out["unanswered"] += len(phrases) - len(report.turns)  # turns never spoken (the call ended early)
    for k in ("received", "lost", "late", "out_of_order", "duplicates"):
        out["rtp"][k] += getattr(report.rtp, k)
    out["rtp"]["calls_with_2_senders"] += report.rtp.ssrcs > 1
    out["rtp"]["max_late_ms"] = max(out["rtp"]["max_late_ms"], round(report.rtp.max_late_ms, 1))
    _add_stats(out, await server.record(report.call_id))


async def genesys_call(server: Server, phrases: list[str], out: dict) -> None:
    report = await run_genesys_call(GenesysCallerConfig(
        url=f"ws://127.0.0.1:{server.port}/genesys/audiohook", api_key=GENESYS_KEY, client_secret=GENESYS_SECRET,
        utterances=tuple(CallerUtterance(text=p) for p in phrases), timeout_s=40 + 10 * len(phrases)))
    if report.status:
        raise CallerError(f"the Genesys upgrade was refused: HTTP {report.status}")
    out["v2v"].extend(report.v2v_ms)
    out["unanswered"] += len(phrases) - len(report.v2v_ms)
    if report.faults:
        out["errors"].extend(report.faults[:3])
    _add_stats(out, await server.record(f"genesys-{report.session_id}"))


async def one_call(kind: str, server: Server, phrases: list[str], out: dict, voice: Voice, lead_s: float) -> None:
    try:
        if kind == "twilio":
            await twilio_call(server, phrases, out)
        elif kind == "webrtc":
            await webrtc_call(server, phrases, out, voice, lead_s)
        elif kind == "genesys":
            await genesys_call(server, phrases, out)
        else:
            await sip_call(server, phrases, out, voice)
    except (CallerError, OSError, TimeoutError) as exc:
        out["failed_calls"] += 1
        out["errors"].append(f"{type(exc).__name__}: {exc}"[:200])


async def calls_here(calls: list[tuple[str, list[str]]], server: ServerAddress, voice: Voice,
                     lead_s: float) -> tuple[dict[str, dict], list[float]]:
    """Run these calls at once in this process; -> results by transport, and how late this
    process's event loop ran meanwhile (ms, every 20 ms): a late caller loop inflates v2v."""
    results = {k: _empty() for k in TRANSPORTS}
    lags: list[float] = []
    probe = asyncio.get_running_loop().create_task(LoopLagProbe(lags.append, interval_s=0.02).run())
    try:
        await asyncio.gather(*(one_call(kind, server, phrases, results[kind], voice, lead_s)
                               for kind, phrases in calls))
    finally:
        probe.cancel()
    return results, lags


async def calls_in_processes(calls: list[tuple[str, list[str]]], server: ServerAddress,
                             lead_s: float) -> tuple[dict[str, dict], dict[str, list[float]]]:
    """The same, one caller process per transport (started together), so that the callers of
    one transport do not wait behind another's (aiortc's Opus and SRTP) for the GIL."""
    by_kind: dict[str, list[list[str]]] = collections.defaultdict(list)
    for kind, phrases in calls:
        by_kind[kind].append(phrases)
    procs = {kind: await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--callers", kind, "--callers-server", f"{server.port}:{server.sip_port}",
        "--callers-calls", json.dumps(share), "--mixed-webrtc-lead-s", str(lead_s),
        stdout=asyncio.subprocess.PIPE, cwd=ROOT) for kind, share in by_kind.items()}
    results = {k: _empty() for k in TRANSPORTS}
    lags: dict[str, list[float]] = {}
    for kind, proc in procs.items():
        stdout, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"the {kind} caller process failed (exit code {proc.returncode})")
        doc = json.loads(stdout.decode().strip().splitlines()[-1])
        got = doc["results"][kind]
        for key in ("rtp", "server_stats"):
            got[key] = collections.Counter(got[key])
        results[kind] = got
        lags[kind] = doc["lags"]
    return results, lags



def summarise(prefix: str, results: dict[str, dict], out: dict) -> None:
    for kind, r in results.items():
        p = pct(r["v2v"])
        for k in ("p50", "p95", "p99"):
            out[f"{prefix}{kind}_v2v_ms_{k}"] = p[k]
        out[f"{prefix}{kind}_turns_answered"] = p["n"]
        out[f"{prefix}{kind}_overlapped_turns"] = len(r["v2v_overlapped"])
        out[f"{prefix}{kind}_v2v_ms_p50_incl_overlapped"] = pct(r["v2v"] + r["v2v_overlapped"])["p50"]
        out[f"{prefix}{kind}_unanswered_turns"] = r["unanswered"] + sum(
            1 for x in r["v2v"] + r["v2v_overlapped"] if x is None)
        out[f"{prefix}{kind}_failed_calls"] = r["failed_calls"]
        if r["errors"]:
            out[f"{prefix}{kind}_errors"] = r["errors"][:3]
        if kind == "sip":
            out[f"{prefix}sip_rtp_lost"] = r["rtp"]["lost"]
            out[f"{prefix}sip_rtp_late_60ms"] = r["rtp"]["late"]
            out[f"{prefix}sip_rtp_received"] = r["rtp"]["received"]
            out[f"{prefix}sip_rtp_max_late_ms"] = r["rtp"]["max_late_ms"]
            out[f"{prefix}sip_calls_with_2_rtp_senders"] = r["rtp"]["calls_with_2_senders"]
            out[f"{prefix}sip_server_dropped_in"] = r["server_stats"].get("dropped_packets")
        st = r["server_stats"]
        frames = {k.removeprefix("frames_"): st.get(k, 0) for k in FRAME_KEYS}
        out[f"{prefix}{kind}_frames"] = frames
        out[f"{prefix}{kind}_frames_dropped"] = frames["in_lost"] + frames["out_underrun"]
        out[f"{prefix}{kind}_frames_late"] = frames["in_late"] + frames["out_late"]
        out[f"{prefix}{kind}_server_stats"] = {k: v for k, v in st.items() if k not in FRAME_KEYS}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=6, help="turns at one call, per transport (default %(default)s)")
    ap.add_argument("--turns-per-call", type=int, default=3)
    ap.add_argument("--mixed", type=int, default=16, help="concurrent calls over all transports (default %(default)s)")
    ap.add_argument("--mixed-turns", type=int, default=2, help="turns per mixed call")
    ap.add_argument("--webrtc-lead-s", type=float, default=4.0, help="WebRTC caller's silence before speaking")
    ap.add_argument("--mixed-webrtc-lead-s", type=float, default=8.0, help="the same in the mixed load")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 turns per transport, 3 mixed calls of 2 turns")
    ap.add_argument("--tts", choices=["ssm", "espeak"], default="ssm",
                    help="the server's voice (parley serve's default: ssm)")
    ap.add_argument("--stt", choices=["ssm", "sphinx"], default="ssm",
                    help="the server's recogniser (parley serve's default: ssm, one batched model "
                    "for all calls; sphinx: pocketsphinx decoders)")
    ap.add_argument("--vad", choices=["silero", "webrtc"], default="silero",
                    help="the server's voice activity detector (parley serve's default: silero)")
    ap.add_argument("--mixed-only", action="store_true", help="skip the one-call-at-a-time phase")
    ap.add_argument("--mixed-transports", default=",".join(MIXED_DEFAULT),
                    help="the transports the mixed load uses, round-robin (default %(default)s)")
    ap.add_argument("--engine-procs", choices=["both", "1", "0"], default="both",
                    help="1: the server runs its recognizer and voice in worker processes (parley serve's "
                    "default); 0: in the server process; both: the mixed load on each, the baseline's keys "
                    "prefixed inproc_ (default %(default)s)")
    ap.add_argument("--caller-procs", type=int, choices=(0, 1), default=1,
                    help="1: the mixed load's callers run in one process per transport; 0: all in this "
                    "one (their event loop then lags under load, inflating v2v) (default %(default)s)")
    ap.add_argument("--callers", choices=TRANSPORTS, help=argparse.SUPPRESS)  # a caller process
    ap.add_argument("--callers-server", help=argparse.SUPPRESS)
    ap.add_argument("--callers-calls", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.callers:
        await caller_process_main(args)
        return
    if args.quick:
        args.turns, args.turns_per_call, args.mixed, args.mixed_turns = 3, 3, 3, 2
    if args.mixed_only:
        args.turns = 0
    kinds = tuple(k for k in args.mixed_transports.split(",") if k)
    if not kinds or set(kinds) - set(TRANSPORTS):
        ap.error(f"--mixed-transports takes a comma list of {', '.join(TRANSPORTS)}")
    ice.pin_host_addresses(ice.LOOPBACK)
    voice = Voice()
    await voice.prepare(PHRASES)

    t0 = time.perf_counter_ns()
    sha = git_sha()
    out: dict[str, object] = {
        "bench": "transports", "git": sha, "seed": args.seed, "quick": args.quick,
        "stt": args.stt, "tts": args.tts, "vad": args.vad, "turns_per_transport": args.turns, "mixed_calls": args.mixed,
        "mixed_transports": list(kinds), "mixed_turns": args.mixed_turns, "cpus": os.cpu_count(),
        "caller_procs": args.caller_procs, "engine_procs": args.engine_procs,
    }
    # worker processes first (parley serve's default); then, for "both", the same load on the same
    # calls with every engine in the server process: the baseline
    for procs in ([1, 0] if args.engine_procs == "both" else [int(args.engine_procs)]):
        await session(args, kinds, voice, random.Random(args.seed), procs, out,
                      prefix="" if procs or args.engine_procs != "both" else "inproc_")
    out["wall_s"] = round((time.perf_counter_ns() - t0) / 1e9, 1)
    print(json.dumps(out))


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process and its live children, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(entry) == pid or int(fields[1]) == pid:  # fields[1]: the parent's pid
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot, summed over its cores, from
    /proc/stat's first line: busy is everything but idle and iowait."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / tick, sum(fields) / tick


async def session(args: argparse.Namespace, kinds: tuple[str, ...], voice: Voice, rng: random.Random,
                  engine_procs: int, out: dict, prefix: str) -> None:
    """One server (engines in worker processes or not): warm-up, phase 1 (when asked), the mixed load."""
    with tempfile.TemporaryDirectory(prefix="parley-bench-") as db_dir:
        # pocketsphinx: a decoder per concurrent call, built before the calls (parley serve
        # --stt-warm), as an operator expecting this load would set it
        browser = sum(1 for i in range(args.mixed) if kinds[i % len(kinds)] == "webrtc")
        stt_warm = f"{max(1, args.mixed - browser)}:{max(1, browser)}"
        server = Server(db_dir, stt=args.stt, tts=args.tts, stt_warm=stt_warm, vad=args.vad,
                        engine_procs=engine_procs)
        try:
            await server.wait_ready()
            warm = {k: _empty() for k in TRANSPORTS}
            for kind in TRANSPORTS:  # warm-up: one call each (loads the STT decoder, binds SIP)
                await one_call(kind, server, ["hello how are you"], warm[kind], voice, args.webrtc_lead_s)
            single = {k: _empty() for k in TRANSPORTS}
            for _ in range(args.turns // args.turns_per_call if args.turns and not prefix else 0):
                phrases = rng.sample(PHRASES, args.turns_per_call)
                for kind in TRANSPORTS:  # alternate: noise hits all alike
                    await one_call(kind, server, phrases, single[kind], voice, args.webrtc_lead_s)
            calls = [(kinds[i % len(kinds)], rng.sample(PHRASES, args.mixed_turns)) for i in range(args.mixed)]
            load_before = os.getloadavg()[0]
            lag_before = await server.loop_lag_buckets()
            gc_before = await server.gc_pauses()
            cpu_before, wall_before = cpu_seconds(server.proc.pid), time.monotonic()
            machine_before = machine_cpu_seconds()
            if args.caller_procs:
                mixed, caller_lags = await calls_in_processes(calls, server, args.mixed_webrtc_lead_s)
            else:
                mixed, lags = await calls_here(calls, server, voice, args.mixed_webrtc_lead_s)
                caller_lags = {"all": lags}
            wall_mixed = time.monotonic() - wall_before
            server_cores = (cpu_seconds(server.proc.pid) - cpu_before) / wall_mixed
            machine_after = machine_cpu_seconds()
            machine_busy = machine_after[0] - machine_before[0]
            machine_busy_frac = machine_busy / max(1e-9, machine_after[1] - machine_before[1])
            load_after = os.getloadavg()[0]
            lag_after = await server.loop_lag_buckets()
            gc_after = await server.gc_pauses()
            metrics_frames = await server.metrics_frames()
        finally:
            server.stop()
        server_warnings, warning_kinds = server.warnings()
    out.update({
        f"{prefix}stt_warm": stt_warm, f"{prefix}loadavg_1m_before_mixed": round(load_before, 2),
        f"{prefix}loadavg_1m_after_mixed": round(load_after, 2),
        f"{prefix}server_cpu_cores_mixed": round(server_cores, 2),  # the server and its engine processes
        # the whole machine meanwhile: how busy its cores were, and the cores used by everything
        # but the server (this bench's callers, and whatever else runs on the machine)
        f"{prefix}machine_cpu_busy_mixed": round(machine_busy_frac, 3),
        f"{prefix}other_cpu_cores_mixed": round(machine_busy / wall_mixed - server_cores, 2),
        f"{prefix}server_log_warnings": server_warnings, f"{prefix}server_log_warning_kinds": warning_kinds,
        f"{prefix}warmup_failed_calls": {k: w["failed_calls"] for k, w in warm.items()},
    })
    if args.turns and not prefix:
        summarise("", single, out)
    summarise(f"{prefix}mixed{args.mixed}_", mixed, out)
    for who, lags in caller_lags.items():  # the callers' own clocks: trustworthy while these are small
        p = pct(lags)
        out[f"{prefix}mixed{args.mixed}_caller_loop_lag_ms_{who}"] = {k: p[k] for k in ("p50", "p95", "p99")}
    out[f"{prefix}mixed{args.mixed}_server_loop_lag"] = lag_during(lag_before, lag_after)
    # the server process's garbage-collector pauses during the mixed load, by generation
    out[f"{prefix}mixed{args.mixed}_server_gc_pauses"] = {
        g: {k: round(v - gc_before.get(g, {}).get(k, 0), 1) for k, v in after.items()}
        for g, after in gc_after.items()}
    out[f"{prefix}metrics_frames_all_calls"] = metrics_frames  # warm-up and phase 1 included


def lag_during(before: dict[str, int], after: dict[str, int]) -> dict[str, object]:
    """The server's event-loop wakes during the mixed load (its probe wakes every 50 ms), from two
    reads of the cumulative histogram: how many, how many woke over 50 / 100 ms late, and the
    bucket bound under which 99 % fell (a stall of the loop delays every call's audio at once)."""
    if not before or not after:
        return {}
    count = {le: after[le] - before.get(le, 0) for le in after}
    n = count.get("+Inf", 0)
    bounds = sorted((float(le), c) for le, c in count.items() if le != "+Inf")
    p99 = next((b for b, c in bounds if c >= 0.99 * n), None) if n else None
    return {"wakes": n, "late_over_50ms": n - count.get("50", n), "late_over_100ms": n - count.get("100", n),
            "p99_le_ms": p99 if p99 is not None else (">" + str(bounds[-1][0]) if bounds and n else None)}


async def caller_process_main(args: argparse.Namespace) -> None:
    """``--callers KIND``: run a share of the mixed load here and print its results as JSON."""
    port, sip_port = (int(x) for x in args.callers_server.split(":"))
    shares = json.loads(args.callers_calls)
    ice.pin_host_addresses(ice.LOOPBACK)
    voice = Voice()
    await voice.prepare(sorted({p for share in shares for p in share}))
    freeze_startup_heap()  # as the server does: a full collection here stalled every caller 40-110 ms
    results, lags = await calls_here([(args.callers, share) for share in shares], ServerAddress(port, sip_port),
                                     voice, args.mixed_webrtc_lead_s)
    print(json.dumps({"results": results, "lags": lags}))


if __name__ == "__main__":
    asyncio.run(main())
