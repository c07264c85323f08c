"""What does packing a data set as Opus (to carry it to the GPU machine) cost what the recogniser hears?

    .venv/bin/parley data stt --out data/stt/dev-b --train 0 --heldout 150 --seed 51 --workers 2   # once
    .venv/bin/python benchmarks/bench_stt_pack.py [--data data/stt/dev-b] [--levels 0.97 0.985 1.0]

`parley data pack` writes each clip as 8 kHz Ogg Opus at a libsndfile compression level; the
lower the bitrate, the more hours fit in the 64 MiB the GPU machine takes. The same held-out
clips (synthetic voices never trained on), as WAV and packed at each level, go through the 8 kHz
mu-law channel to the shipped recogniser (joint finals), one after another in this process:
WER and CER, each level's ratio to the WAV's, its bitrate and the hours 26 MB would carry. The
recogniser never heard Opus in training, so this is the codec's damage as a model trained on
clean audio sees it: the mismatch a GPU run trained on packed clips would start from.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from harness.stt_eval import evaluate  # noqa: E402
from ssm_engine.data.pack import pack, unpack  # noqa: E402

CARRY_MB = 26.0          # audio that travels with room to spare (device-prepare-stt allows 30 by default)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data/stt/dev-b", help="a data set with heldout.tsv")
    ap.add_argument("--levels", nargs="+", type=float, default=[0.97, 0.985, 1.0])
    ap.add_argument("--model", default=None, help="SSM model folder (default models/stt)")
    args = ap.parse_args(argv)
    data = Path(args.data)
    if not (data / "heldout.tsv").exists():
        ap.error(f"{data}/heldout.tsv is missing: make it first (see this script's docstring)")
    torch.set_num_threads(1)
    base = evaluate("ssm", data / "heldout.tsv", model_dir=args.model, compile=False)
    out: dict = {"bench": "stt_pack", "git": git_sha(), "data": str(data), "clips": base.n,
                 "wav": {"wer": base.wer, "cer": base.cer}, "levels": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for level in args.levels:
            summary = pack(data, Path(tmp) / f"{level}.tgz", level=level)
            packed = unpack(Path(tmp) / f"{level}.tgz", Path(tmp) / str(level))
            res = evaluate("ssm", packed / "heldout.tsv", model_dir=args.model, compile=False)
            out["levels"][str(level)] = {
                "kbps": summary["kbps"], "wer": res.wer, "cer": res.cer,
                "wer_vs_wav": round(res.wer / base.wer, 3) if base.wer else None,
                "cer_vs_wav": round(res.cer / base.cer, 3) if base.cer else None,
                "hours_in_26mb": round(CARRY_MB * 2**20 * 8 / (summary["kbps"] * 1000) / 3600, 2)}
            print(f"level {level}: {summary['kbps']} kb/s, WER {res.wer:.3f} (WAV {base.wer:.3f})",
                  file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
