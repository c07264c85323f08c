"""What does reaching the model tier through a SageMaker endpoint (``--model-url sagemaker://``)
cost over a direct model-server stream, and what does a caller lose when an instance fails?

One run, on loopback, one model server (eager steps, one torch thread): the same engines dial it
directly (``ws://``) and through the sagemaker:// chain, the two alternating item by item:

    engine -> bridge process (Python 3.12, AWS's HTTP/2 client, SigV4 per event) -> a stand-in
    runtime (HTTP/2 + TLS, signatures checked; harness/aws/sagemaker_bidi_runtime.py) -> the
    model server's /invocations-bidirectional-stream (as SageMaker's sidecar reaches it)

* ``tts_first_audio_ms``: a sentence asked for -> its first audio, the engine's socket already
  open (as in a call); ``overhead_p50_ms`` = sagemaker p50 - direct p50.
* ``stt_final_ms``: an utterance (flite, 8 kHz) streamed at real time, then finish -> its final.
* ``stream_open_ms``: a new stream's first audio (a reply on a fresh socket: what a failover costs
  before audio flows again), both ways.
* ``failover``: the runtime ends the stream with InternalStreamFailure after N parts (an instance
  lost mid-reply) while the reply plays at real time: the playout's silent gap (ms) and words lost.

AWS's own network and the real sidecar are not in this: the figures are the bridge's, the
signing's and HTTP/2's cost on one machine.

    .venv/bin/python benchmarks/bench_sagemaker_stream.py [--sentences 30] [--utterances 10] [--failovers 5]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_model_server import (  # noqa: E402
    LONG_REPLY, RATE, SENTENCES, UTTERANCES, ModelServer, final_ms, first_audio_ms, flite, play_out,
)
from common import git_sha, percentiles  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from deploy.sagemaker_stream.launcher import StreamBridge  # noqa: E402
from deploy.sagemaker_stream.targets import Target  # noqa: E402
from harness.aws.sagemaker_bidi_runtime import ACCESS_KEY, SECRET_KEY, BidiRuntime, make_certificate  # noqa: E402
from pipeline.engines.remote_recognizer import RemoteRecognizerEngine  # noqa: E402
from pipeline.engines.remote_voice import RemoteVoiceEngine  # noqa: E402
from pipeline.engines.replicas import Replicas  # noqa: E402
from pipeline.engines.ssm_voice import SSMVoiceEngine  # noqa: E402
from ssm_engine.stt.decode import wer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

MODELS = ROOT / "models"


async def latency(direct: str, via: str, args, speech) -> dict:
    engines = {name: (RemoteVoiceEngine(Replicas((url,))), RemoteRecognizerEngine(Replicas((url,))))
               for name, url in (("direct", direct), ("sagemaker", via))}
    tts: dict[str, list[float]] = {k: [] for k in engines}
    opens: dict[str, list[float]] = {k: [] for k in engines}
    fin: dict[str, list[float]] = {k: [] for k in engines}
    same = []
    try:
        for voice, stt in engines.values():           # sockets open and both paths warm
            for text in SENTENCES[:3]:
                await first_audio_ms(voice, text)
            await final_ms(stt, speech[0], paced=False)
        for k in range(args.sentences):
            for name, (voice, _) in engines.items():
                tts[name].append(await first_audio_ms(voice, SENTENCES[k % len(SENTENCES)]))
        for k in range(max(3, args.sentences // 3)):  # a fresh socket: a new stream each time
            for name, url in (("direct", direct), ("sagemaker", via)):
                fresh = RemoteVoiceEngine(Replicas((url,)))
                try:
                    opens[name].append(await first_audio_ms(fresh, SENTENCES[k % len(SENTENCES)]))
                finally:
                    await fresh.close()
        for k in range(args.utterances):
            texts = {}
            for name, (_, stt) in engines.items():
                ms, texts[name] = await final_ms(stt, speech[k % len(speech)])
                fin[name].append(ms)
            same.append(wer([normalize_text(texts["direct"])], [normalize_text(texts["sagemaker"])]))
    finally:
        for voice, stt in engines.values():
            await voice.close()
            await stt.close()
    med = {k: float(np.median(v)) for k, v in tts.items()}
    return {
        "tts_first_audio_ms": {k: percentiles(v) for k, v in tts.items()},
        "tts_overhead_p50_ms": round(med["sagemaker"] - med["direct"], 2),
        "tts_ratio_p50": round(med["sagemaker"] / med["direct"], 2),
        "stream_open_ms": {k: percentiles(v) for k, v in opens.items()},
        "stt_final_ms": {k: percentiles(v) for k, v in fin.items()},
        "stt_overhead_p50_ms": round(float(np.median(fin["sagemaker"]) - np.median(fin["direct"])), 2),
        "stt_sagemaker_vs_direct_wer": round(float(np.mean(same)), 3),
    }


async def failover(runtime: BidiRuntime, via: str, n: int) -> dict:
    local = SSMVoiceEngine(MODELS / "tts")
    expected = [w for c in [c async for c in local.open(RATE).speak(LONG_REPLY)] for w, _ in c.words]
    local.close()
    gaps, lost = [], []
    for _ in range(n):
        runtime.fail_stream_after = 12             # ~0.25 s of audio in, the instance is lost
        engine = RemoteVoiceEngine(Replicas((via,)))
        try:
            played = await play_out(engine, LONG_REPLY)
        finally:
            await engine.close()
        gaps.append(played["gap_ms"])
        matched = difflib.SequenceMatcher(a=expected, b=played["words"], autojunk=False).get_matching_blocks()
        lost.append(len(expected) - sum(m.size for m in matched))
    return {"trials": n, "gap_ms": percentiles(gaps), "words_lost_total": int(sum(lost)),
            "streams_failed": sum(1 for s in runtime.streams if s.ended_by == "InternalStreamFailure")}


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=30)
    p.add_argument("--utterances", type=int, default=10)
    p.add_argument("--failovers", type=int, default=5)
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench-sagemaker-"))
    speech = [np.concatenate([np.zeros(RATE // 4, np.int16), flite(t, work), np.zeros(RATE // 2, np.int16)])
              for t in UTTERANCES]
    cert, key = make_certificate(work)
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_CA_BUNDLE=str(cert),
                      AWS_EC2_METADATA_DISABLED="true")
    server = ModelServer(work)
    runtime = bridge = None
    out: dict = {"bench": "sagemaker_stream", "git": git_sha(), "machine_cores": os.cpu_count()}
    try:
        await server.wait_warm()
        runtime = BidiRuntime(endpoints=("parley-models",), upstreams=[f"http://127.0.0.1:{server.port}"])
        await runtime.start(cert, key)
        target = Target.parse(f"sagemaker://parley-models?region=us-east-1&endpoint_url=https://127.0.0.1:{runtime.port}")
        bridge = StreamBridge((target,))
        t0 = time.perf_counter()
        (via,) = await asyncio.to_thread(bridge.start)
        out["bridge_start_s"] = round(time.perf_counter() - t0, 2)
        out.update(await latency(server.url, via, args, speech))
        out["failover"] = await failover(runtime, via, args.failovers)
        out["bad_signatures"] = sum(s.bad_signatures for s in runtime.streams)
        out["streams"] = len(runtime.streams)
    finally:
        if bridge is not None:
            bridge.close()
        if runtime is not None:
            await runtime.stop()
        server.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
