"""How much silence must Whisper's decoder see after an utterance? The finals' padding, measured.

    .venv/bin/python benchmarks/bench_whisper_final.py [--manifest data/stt/human/human.tsv]
        [--pads 0 2 3 5 10] [--limit N]

Whisper reads 30 s: an utterance, then silence to 30 s. parley's finals (``pipeline.engines.
whisper_final``) encode the utterance with ``pad`` seconds of silence after it and give the
decoder Whisper's encoding of 30 s of silence for the frames past those. This runs each clip of
the human development set through the 8 kHz mu-law phone channel and decodes it (greedy,
digits as words) at every padding asked, beside Whisper's own pass over the clip padded to 30 s
(greedy, and beam 5 as ``--stt whisper`` decodes), in one process on one thread. Pad 0: the
decoder sees the utterance's own frames only, no silence encoding after them (Whisper then
repeats itself). Each padding's text is made a final as the finals make it (``final_text``:
words as said, a run repeated five times kept once); Whisper's own passes are scored as
``--stt whisper`` gives them. Reported per
setting: WER, CER, the decode time p50/p95/p99 (encoding and decoding), the ratio to the WER of
Whisper's own pass with beam 5, and how many generations ran out of tokens (a loop).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha, percentiles  # noqa: E402

import numpy as np  # noqa: E402

from harness.stt_eval import _read_clip, phone_channel  # noqa: E402
from pipeline.engines.whisper import WhisperRecognizer  # noqa: E402
from pipeline.engines.whisper_final import WhisperFinal, final_text  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.decode import cer, wer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

RATE = 8000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default="data/stt/human/human.tsv")
    ap.add_argument("--pads", nargs="+", type=float, default=[0.0, 2.0, 3.0, 5.0, 10.0],
                    help="seconds of silence encoded after the utterance (default %(default)s)")
    ap.add_argument("--limit", type=int, default=None, help="the first N clips only")
    args = ap.parse_args(argv)
    if not Path(args.manifest).exists():
        ap.error(f"{args.manifest} is missing: run scripts/install-human-speech, then "
                 "parley data human")
    rows = read_manifest(args.manifest)[: args.limit]
    clips = []
    for path, text in rows:
        pcm, rate = _read_clip(Path(path))
        heard = phone_channel(pcm, rate, RATE, "mulaw").astype(np.float32) / 32768.0
        clips.append((heard, normalize_text(text)))
    greedy, beam = WhisperRecognizer(beam_size=1), WhisperRecognizer(beam_size=5)
    settings: dict[str, dict] = {}

    def score(name: str, decode) -> None:  # noqa: ANN001
        hyps, refs, times, loops = [], [], [], 0
        for audio, ref in clips:
            t0 = time.perf_counter()
            text, ended = decode(audio)
            times.append((time.perf_counter() - t0) * 1000)
            loops += not ended
            hyps.append(normalize_text(text))
            refs.append(ref)
        settings[name] = {"wer": round(wer(refs, hyps), 4), "cer": round(cer(refs, hyps), 4),
                          "decode_ms": percentiles(times), "loops": loops}
        print(f"{name}: WER {settings[name]['wer']:.3f} p50 "
              f"{settings[name]['decode_ms']['p50']} ms", file=sys.stderr)

    score("whisper_30s_greedy", lambda a: (greedy.transcribe(a, RATE), True))
    score("whisper_30s_beam5", lambda a: (beam.transcribe(a, RATE), True))
    for pad in args.pads:
        wf = WhisperFinal(greedy, pad_s=pad)
        wf.load()
        if pad == 0:
            assert wf._silence is not None
            wf._silence = wf._silence[:, :0]      # the utterance's frames only
        score(f"pad_{pad:g}s", lambda a, wf=wf: (lambda r: (final_text(r[0]), r[2]))(wf.decode(a, RATE)))
    base = settings["whisper_30s_beam5"]["wer"]     # Whisper as parley runs it (--stt whisper)
    for s in settings.values():
        s["wer_over_whisper"] = round(s["wer"] / max(base, 1e-9), 2)
    print(json.dumps({"bench": "whisper_final", "manifest": args.manifest, "clips": len(clips),
                      "settings": settings, "git": git_sha()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
