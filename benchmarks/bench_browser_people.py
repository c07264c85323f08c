"""Are recorded people heard as well through a browser call as from the file?

Each clip of the human development set (``parley data human``; ``--clips`` of them, evenly spaced
over the manifest) is the fake microphone of a headless Chromium (``--use-file-for-fake-audio-
capture``: 48 kHz, Opus over WebRTC, pipecat's resampling to 16 kHz, as a person calling from the
browser page would be heard) calling a real ``parley serve`` (the echo agent, which greets and
repeats what it heard) on loopback. The microphone is quiet ``LEAD_S`` from the click on Call
(the call connects; the caller speaks over the greeting, as people do), says the clip, and hangs
up once ``TAIL_S`` of quiet have gone by; what the server heard is every final of the caller's on
the page, joined (a pause may end a turn inside a clip).

Beside it, in the same run, the same recogniser on the same clips read from the file at 16 kHz,
with the VAD's pauses (``parley eval stt``'s ``--turn-end``): the ratio says what the browser path
costs. ``--audio`` names the page's microphone modes: ``processed`` (the default page: the
browser's echo cancellation, noise suppression and gain control) and ``raw`` (``/?audio=raw``).
``--stt`` names the recognisers (default the shipped ``ssm`` and ``whisper``, Whisper tiny.en:
the yardstick). WER and CER per recogniser and path. (How soon the finals come is
``bench_conversations``' and ``bench_capacity``'s question: the page's clock does not know when
Chromium began playing the file.)

    .venv/bin/python benchmarks/bench_browser_people.py [--clips 60] [--stt ssm whisper] [--audio processed raw]

Prints one JSON line; ``--hyps DIR`` writes each clip's reference and hypotheses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import git_sha  # noqa: E402
from serve_process import ServeProcess, free_port  # noqa: E402

from harness.stt_eval import _read_clip, evaluate  # noqa: E402
from pipeline.audio.wav import write_wav  # noqa: E402
from ssm_engine.stt.decode import cer, wer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
RATE_HZ = 48_000          # Chromium's fake capture plays the file at its rate; 48 kHz is WebRTC's own
LEAD_S = 3.0              # the microphone (from the click on Call) is quiet this long: the call connects
TAIL_S = 3.0              # and this long after the clip: the last final comes within it
CALL_TIMEOUT_S = 30.0


def microphone(path: Path, folder: Path, i: int) -> tuple[Path, float]:
    """The clip as Chromium's microphone: quiet, the clip, quiet (48 kHz WAV); and where the
    clip ends, in seconds of the file."""
    pcm, rate = _read_clip(path)
    x = soxr.resample(pcm, rate, RATE_HZ).astype(np.int16) if rate != RATE_HZ else pcm
    out = folder / f"mic{i}.wav"
    quiet = lambda s: np.zeros(int(s * RATE_HZ), np.int16)  # noqa: E731
    write_wav(out, np.concatenate([quiet(LEAD_S), x, quiet(TAIL_S + 2.0)]), RATE_HZ)
    return out, LEAD_S + x.size / RATE_HZ


async def call(pw, page_url: str, mic: Path, clip_end_s: float) -> str:
    """One browser call: the caller's finals, joined."""
    browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
        "--no-sandbox", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={mic}", "--autoplay-policy=no-user-gesture-required",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"])
    try:
        page = await browser.new_page()
        await page.goto(page_url)
        await page.click("#call")
        live = time.monotonic()            # the fake microphone starts as the page asks for it
        await page.wait_for_function("() => document.querySelector('#status').dataset.state === 'live'",
                                     timeout=CALL_TIMEOUT_S * 1000)
        if time.monotonic() - live > LEAD_S - 0.5:
            raise RuntimeError(f"the call took {time.monotonic() - live:.1f} s to connect: the clip began before it")
        await asyncio.sleep(max(0.0, live + clip_end_s + TAIL_S - time.monotonic()))
        messages = await page.evaluate("() => parley.messages")
        await page.click("#hangup")
    finally:
        await browser.close()
    return " ".join(m.get("text", "") for m in messages if m.get("type") == "transcript"
                    and m.get("role") == "user" and m.get("final")).strip()


async def browser_run(stt: str, audio: str, rows: list[tuple[Path, str]], folder: Path) -> list[str]:
    from playwright import async_api

    port = free_port()
    server = ServeProcess(f"parley-{stt}", ["-m", "deploy.cli", "serve", "--port", str(port), "--agent", "echo",
                                            "--stt", stt, "--log-level", "WARNING"],
                          port=port, log_path=folder / f"parley-{stt}.log",
                          env={"TWILIO_AUTH_TOKEN": "bench-browser-people"})
    hyps = []
    try:
        await server.wait_ready(120.0)
        async with async_api.async_playwright() as pw:
            for i, (path, _text) in enumerate(rows):
                mic, end = microphone(path, folder, i)
                page = f"http://127.0.0.1:{port}/" + ("?audio=raw" if audio == "raw" else "")
                heard = await call(pw, page, mic, end)
                hyps.append(normalize_text(heard))
                print(f"{stt} {audio} {i + 1}/{len(rows)}: {heard!r}", file=sys.stderr, flush=True)
    finally:
        server.stop()
    return hyps


async def main_async(args: argparse.Namespace) -> dict:
    out: dict = {"bench": "browser_people", "git": git_sha(), "manifest": str(args.manifest)}
    detail: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for stt in args.stt:
            filed = await asyncio.to_thread(evaluate, stt, args.manifest, rate_hz=16000, codec="none",
                                            limit=args.clips, turn_end=True)
            # the clips the file's run picked (``limit``: evenly spaced), with their references
            rows = [(Path(path), ref) for path, _, ref, _ in filed.utterances]
            refs = detail["ref"] = [ref for _, ref in rows]
            out.update(clips=len(rows), words=sum(len(r.split()) for r in refs))
            detail[f"{stt}_file"] = [hyp for _, _, _, hyp in filed.utterances]
            out[stt] = {"file": {"wer": round(filed.wer, 3), "cer": round(filed.cer, 3)}}
            for audio in args.audio:
                hyps = await browser_run(stt, audio, rows, folder)
                detail[f"{stt}_browser_{audio}"] = hyps
                browser_wer = wer(refs, hyps)
                out[stt][f"browser_{audio}"] = {
                    "wer": round(browser_wer, 3), "cer": round(cer(refs, hyps), 3),
                    "over_file": round(browser_wer / filed.wer, 2) if filed.wer else None,
                    "not_heard": sum(1 for h in hyps if not h)}
            print(f"{stt}: {out[stt]}", file=sys.stderr, flush=True)
    if args.hyps:
        args.hyps.mkdir(parents=True, exist_ok=True)
        (args.hyps / "browser_people.json").write_text(json.dumps(detail, indent=1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=Path("data/stt/human2/human.tsv"),
                        help="the human development set's manifest (parley data human)")
    parser.add_argument("--clips", type=int, default=60, help="clips, evenly spaced over the manifest")
    parser.add_argument("--stt", nargs="+", default=["ssm", "whisper"], choices=["ssm", "whisper", "sphinx"])
    parser.add_argument("--audio", nargs="+", default=["processed"], choices=["processed", "raw"],
                        help="the page's microphone: the browser's processing on (the default page) or off")
    parser.add_argument("--hyps", type=Path, help="write references and hypotheses here")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
