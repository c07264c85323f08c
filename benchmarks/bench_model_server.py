"""What does the model tier cost, how many streams does one server carry, and what does a caller
lose when a replica dies?

One run, on loopback, the SSM models on both sides (the same folders, eager steps unless
``--compile``), one torch thread each:

* ``tts_first_audio_ms``: a sentence asked for -> its first audio, through a model server
  (``RemoteVoiceEngine``, its socket already open) and in process (``SSMVoiceEngine``), the two
  alternating sentence by sentence; ``overhead_p50_ms`` is remote p50 - in-process p50
  (the target: <= 5 ms).
* ``stt_final_ms``: a caller's utterance (flite, 8 kHz) streamed at real time, then "finish" ->
  its final transcript, remote (``RemoteRecognizerEngine``) and in process, alternating; and
  whether both heard the same words.
* ``realtime_streams``: the server pinned to one core (``taskset``), K streams at once for
  K = 1, 2, 4, ... (``--max-streams``): TTS streams each speaking a long reply, every chunk due
  at real time after the first (a 100 ms jitter buffer); STT streams each sending an utterance at
  real time; the largest K at which no TTS stream failed or ran dry, and the largest at which no
  STT stream failed and finals stayed under 100 ms at p95 (each stops doubling past its limit).
* ``failover``: two servers; a reply (``--failovers`` times) played out at real time from its
  first chunk while the replica speaking it is SIGKILLed after 0.5 s of its audio: the playout's
  silent gap (ms), the audio said twice (the word in progress, ms), words lost (against the same
  text in process); an utterance whose replica is SIGKILLed halfway: words lost against the
  same audio heard by one replica, and the extra final latency.

    .venv/bin/python benchmarks/bench_model_server.py [--sentences 30] [--utterances 10] [--failovers 5]
        [--max-streams 32] [--parts latency,capacity,failover] [--compile]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import git_sha, percentiles  # noqa: E402
from serve_process import ServeProcess, free_port  # noqa: E402

import aiohttp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from pipeline.engines.remote_recognizer import RemoteRecognizerEngine  # noqa: E402
from pipeline.engines.remote_voice import RemoteVoiceEngine  # noqa: E402
from pipeline.engines.replicas import Replicas  # noqa: E402
from pipeline.engines.ssm_voice import SSMVoiceEngine  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.engines.ssm_recognizer import SSMSTTEngine  # noqa: E402
from ssm_engine.stt.decode import wer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

MODELS = ROOT / "models"
RATE = 8000
SENTENCES = [
    "Thank you for calling, how can I help you today?", "Your order ships on Tuesday.",
    "We are open from nine to five on weekdays.", "Can I have your phone number, please?",
    "I have your name as Sarah Miller, is that right?", "The total comes to forty two dollars.",
    "Parking is free behind the building.", "Let me put you through to the front desk.",
    "Is there anything else I can help you with?", "Your appointment is at ten thirty on Friday.",
]
UTTERANCES = ["i would like to check my order", "what are your opening hours", "can i speak to a person",
              "my number is five five five one two three four", "yes that is right", "no thank you goodbye",
              "do you take insurance", "i need to book an appointment", "is there parking", "thank you very much"]
LONG_REPLY = ("Thank you for calling the dental office. We are open from eight in the morning until six in the "
              "evening on weekdays, and from nine until one on Saturdays. Parking is free behind the building.")


class ModelServer(ServeProcess):
    def __init__(self, log_dir: Path, *, cpu: str | None = None, compile: bool = False) -> None:
        port = free_port()
        args = ["-m", "deploy.cli", "model-server", "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "INFO", "--stt-compile" if compile else "--no-stt-compile",
                "--tts-compile" if compile else "--no-tts-compile"]
        super().__init__(f"model-server:{port}", args, port=port, log_path=log_dir / f"model-server-{port}.log",
                         env={"OMP_NUM_THREADS": "1"})
        if cpu is not None and shutil.which("taskset"):
            subprocess.run(["taskset", "-a", "-p", "-c", cpu, str(self.proc.pid)], check=True,
                           stdout=subprocess.DEVNULL)
        self.url = f"ws://127.0.0.1:{port}"

    async def wait_warm(self, timeout_s: float = 180.0) -> None:
        await self.wait_ready(timeout_s)
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                async with s.get(f"http://127.0.0.1:{self.port}/ping") as r:
                    if r.status == 200:
                        return
                await asyncio.sleep(0.2)
        raise TimeoutError(f"{self.name} not warm: {self.log_tail()}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def flite(text: str, folder: Path, voice: str = "kal") -> np.ndarray:
    import soxr

    from pipeline.audio.wav import read_wav

    path = folder / (re.sub(r"\W+", "_", text)[:40] + f"_{voice}.wav")
    subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(path)], check=True)
    pcm, rate = read_wav(path)
    return (pcm if rate == RATE else soxr.resample(pcm, rate, RATE)).astype(np.int16)


async def first_audio_ms(engine, text: str) -> float:
    utt = engine.open(RATE)
    t0 = time.perf_counter()
    gen = utt.speak(text)
    try:
        await gen.__anext__()
        return (time.perf_counter() - t0) * 1000
    finally:
        utt.cancel()
        await gen.aclose()


async def final_ms(engine, pcm: np.ndarray, paced: bool = True, on_frame=None) -> tuple[float, str]:
    """Stream ``pcm`` (at real time when ``paced``), then finish: -> (final latency ms, its text).
    ``on_frame(k, utt)`` runs after the k-th 20 ms frame (the failover trials kill a replica there)."""
    utt = engine.open(RATE)
    start = time.perf_counter()
    for k, i in enumerate(range(0, len(pcm), 160)):
        fut = utt.push(pcm[i:i + 160].tobytes())
        if fut is not None:
            await utt.take_async(fut)
        if on_frame is not None:
            on_frame(k, utt)
        if paced:
            await asyncio.sleep(max(0.0, start + (k + 1) * 0.02 - time.perf_counter()))
    t0 = time.perf_counter()
    for fut in utt.finish():
        await utt.take_async(fut)
    return (time.perf_counter() - t0) * 1000, utt.text


async def play_out(engine, text: str, on_chunk=None, buffer_s: float = 0.1) -> dict:
    """Receive a reply and play it at real time from its first chunk (after ``buffer_s``):
    the playout's silent gaps, its audio, its words."""
    utt = engine.open(RATE)
    clock = None               # when the next sample is due
    gap_s, samples, words = 0.0, 0, []
    async for chunk in utt.speak(text):
        now = time.perf_counter()
        if clock is None:
            clock = now + buffer_s
        elif now > clock:      # the player ran dry: it waits for this chunk
            gap_s += now - clock
            clock = now
        clock += len(chunk.pcm) / RATE
        samples += len(chunk.pcm)
        words += [w for w, _ in chunk.words]
        if on_chunk is not None:
            on_chunk(samples)
    return {"gap_ms": gap_s * 1000, "seconds": samples / RATE, "words": words}


async def latency(local_voice, local_stt, urls, args, speech) -> dict:
    voice = RemoteVoiceEngine(Replicas(urls))
    stt = RemoteRecognizerEngine(Replicas(urls))
    try:
        await first_audio_ms(voice, "Hello.")          # the socket opens once, as in a call
        for text in SENTENCES:                          # both sides warm (the server warmed itself)
            await first_audio_ms(local_voice, text)
            await first_audio_ms(voice, text)
        await final_ms(local_stt, speech[0], paced=False)
        await final_ms(stt, speech[0], paced=False)
        tts = {"remote": [], "local": []}
        for k in range(args.sentences):
            text = SENTENCES[k % len(SENTENCES)]
            tts["remote"].append(await first_audio_ms(voice, text))
            tts["local"].append(await first_audio_ms(local_voice, text))
        fin = {"remote": [], "local": []}
        same = []
        for k in range(args.utterances):
            pcm = speech[k % len(speech)]
            r_ms, r_text = await final_ms(stt, pcm)
            l_ms, l_text = await final_ms(local_stt, pcm)
            fin["remote"].append(r_ms)
            fin["local"].append(l_ms)
            same.append(wer([normalize_text(l_text)], [normalize_text(r_text)]))
    finally:
        await voice.close()
        await stt.close()
    return {
        "tts_first_audio_ms": {k: percentiles(v) for k, v in tts.items()},
        "tts_overhead_p50_ms": round(float(np.median(tts["remote"]) - np.median(tts["local"])), 2),
        "stt_final_ms": {k: percentiles(v) for k, v in fin.items()},
        "stt_overhead_p50_ms": round(float(np.median(fin["remote"]) - np.median(fin["local"])), 2),
        "stt_remote_vs_local_wer": round(float(np.mean(same)), 3),
    }


async def capacity(url: str, speech: list[np.ndarray], max_k: int) -> dict:
    """K streams at once, K doubling until a stream runs dry, fails or a final takes > 100 ms p95."""
    out: dict[str, list] = {"tts": [], "stt": []}

    async def reply(voice) -> dict | None:
        try:
            return await play_out(voice, LONG_REPLY)
        except PipelineError:
            return None

    async def utterance(stt, pcm) -> float | None:
        try:
            return (await final_ms(stt, pcm))[0]
        except PipelineError:
            return None

    k, tts_ok, stt_ok = 1, 0, 0
    while k <= max_k and (tts_ok == k // 2 or stt_ok == k // 2):
        if tts_ok == k // 2:
            voice = RemoteVoiceEngine(Replicas((url,)))
            try:
                runs = await asyncio.gather(*(reply(voice) for _ in range(k)))
            finally:
                await voice.close()
            dry = [r["gap_ms"] for r in runs if r is not None]
            row = {"streams": k, "failed": sum(r is None for r in runs), "dry_streams": sum(g > 0 for g in dry),
                   "dry_ms_max": round(max(dry, default=0.0), 1)}
            out["tts"].append(row)
            tts_ok = k if row["failed"] == row["dry_streams"] == 0 else tts_ok
        if stt_ok == k // 2:
            stt = RemoteRecognizerEngine(Replicas((url,)))
            try:
                finals = await asyncio.gather(*(utterance(stt, speech[i % len(speech)]) for i in range(k)))
            finally:
                await stt.close()
            done = [f for f in finals if f is not None]
            row = {"streams": k, "failed": len(finals) - len(done), "final_ms": percentiles(done)}
            out["stt"].append(row)
            stt_ok = k if row["failed"] == 0 and (row["final_ms"]["p95"] or 1e9) <= 100 else stt_ok
        k *= 2
    out["tts_realtime_streams"] = tts_ok
    out["stt_realtime_streams"] = stt_ok
    return out


def killer(voice: RemoteVoiceEngine, servers: list[ModelServer], killed: list[ModelServer]):
    """A chunk callback that SIGKILLs the replica speaking once 0.5 s of audio has come."""
    def on_chunk(samples: int) -> None:
        if not killed and samples >= RATE // 2:
            live = [u for u, c in voice._connections.items() if c.contexts]
            victim = next(s for s in servers if s.url in live)
            victim.kill()
            killed.append(victim)
    return on_chunk


async def failover(log_dir: Path, local_voice, local_stt, speech, n: int) -> dict:
    local_chunks = [c async for c in local_voice.open(RATE).speak(LONG_REPLY)]
    local_words = [w for c in local_chunks for w, _ in c.words]
    local_s = sum(len(c.pcm) for c in local_chunks) / RATE
    tts_rows, stt_rows = [], []
    for trial in range(n):
        servers = [ModelServer(log_dir), ModelServer(log_dir)]
        try:
            await asyncio.gather(*(s.wait_warm() for s in servers))
            urls = tuple(s.url for s in servers)
            voice = RemoteVoiceEngine(Replicas(urls))
            killed: list[ModelServer] = []
            try:
                played = await play_out(voice, LONG_REPLY, killer(voice, servers, killed))
            finally:
                await voice.close()
            words = played["words"]
            matched = difflib.SequenceMatcher(a=local_words, b=words, autojunk=False).get_matching_blocks()
            lost = len(local_words) - sum(m.size for m in matched)
            tts_rows.append({"gap_ms": round(played["gap_ms"], 1), "failovers": voice.failovers,
                             "said_twice_ms": round(max(0.0, played["seconds"] - local_s) * 1000, 1),
                             "words_lost": lost})
            alive = next(s for s in servers if s not in killed)
            victim2 = ModelServer(log_dir)
            await victim2.wait_warm()
            pcm = speech[trial % len(speech)]
            whole_ms, whole = await final_ms(local_stt, pcm)
            stt = RemoteRecognizerEngine(Replicas((victim2.url, alive.url)))
            half = len(pcm) // 320

            def kill_halfway(k: int, utt, servers=(victim2, alive), half=half) -> None:
                if k == half:
                    next(s for s in servers if s.url == utt.url).kill()
            failed_ms, heard = await final_ms(stt, pcm, on_frame=kill_halfway)
            stt_rows.append({"final_ms": round(failed_ms, 1),
                             "local_final_ms": round(whole_ms, 1), "failovers": stt.failovers,
                             "wer_vs_one_replica": round(wer([normalize_text(whole)], [normalize_text(heard)]), 3)})
            await stt.close()
            victim2.stop()
        finally:
            for s in servers:
                if s.proc.poll() is None:
                    s.stop()
    return {"tts": tts_rows, "stt": stt_rows,
            "tts_gap_ms": percentiles([r["gap_ms"] for r in tts_rows]),
            "tts_words_lost": sum(r["words_lost"] for r in tts_rows),
            "stt_words_lost_wer": round(float(np.mean([r["wer_vs_one_replica"] for r in stt_rows])), 3)}


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=30)
    p.add_argument("--utterances", type=int, default=10)
    p.add_argument("--failovers", type=int, default=5)
    p.add_argument("--max-streams", type=int, default=32)
    p.add_argument("--compile", action="store_true", help="compile the recogniser's step on both sides")
    p.add_argument("--parts", default="latency,capacity,failover",
                   help="which questions to run, comma-separated (default: all three)")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-model-server-"))
    speech = [flite(t, log_dir) for t in UTTERANCES]
    speech = [np.concatenate([np.zeros(RATE // 4, np.int16), s, np.zeros(RATE // 2, np.int16)]) for s in speech]
    local_voice = SSMVoiceEngine(MODELS / "tts")
    local_stt = SSMSTTEngine(MODELS / "stt", compile=args.compile)
    out: dict = {"bench": "model_server", "git": git_sha(), "machine_cores": os.cpu_count(),
                 "compile": args.compile}
    parts = set(args.parts.split(","))
    if "latency" in parts:
        server = ModelServer(log_dir, compile=args.compile)
        try:
            await server.wait_warm()
            out.update(await latency(local_voice, local_stt, (server.url,), args, speech))
        finally:
            server.stop()
    if "capacity" in parts:
        one_core = ModelServer(log_dir, cpu="1", compile=args.compile)
        try:
            await one_core.wait_warm()
            out["capacity_one_core"] = await capacity(one_core.url, speech, args.max_streams)
        finally:
            one_core.stop()
    if "failover" in parts:
        out["failover"] = await failover(log_dir, local_voice, local_stt, speech, args.failovers)
    local_voice.close()
    local_stt.close()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
