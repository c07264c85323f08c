"""Command line: ``parley data stt`` (make a data set) and ``parley train stt`` (train, export).

    from ssm_engine.stt.cli import register_cli
    register_cli(subparsers)      # adds "data stt" and "train stt" under an argparse subparsers

Both commands nest under a shared group parser (``data``, ``train``), created on first use and
reused when another package already registered the group, so ``train tts`` can sit beside
``train stt``. Each leaf sets ``func(args) -> int``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

__all__ = ["register_cli", "group_subparsers"]


def group_subparsers(subparsers: Any, name: str, help_text: str) -> Any:
    """The nested subparsers of group ``name`` (``parley <name> ...``), created if missing."""
    parser = subparsers.choices.get(name)
    if parser is None:
        parser = subparsers.add_parser(name, help=help_text)
    nested = getattr(parser, "_parley_group", None)
    if nested is None:
        nested = parser.add_subparsers(dest=f"{name}_command", required=True, metavar="WHAT")
        parser._parley_group = nested  # type: ignore[attr-defined]
    return nested


def register_cli(subparsers: Any) -> None:
    data = group_subparsers(subparsers, "data", "generate training data")
    p = data.add_parser("stt", help="speech-to-text data from offline voices (flite, espeak-ng, "
                        "pico, mbrola), phone-channel augmented")
    p.add_argument("--out", default="data/stt/v1", help="output folder (default %(default)s)")
    p.add_argument("--train", type=int, default=4500, help="training utterances (default %(default)s)")
    p.add_argument("--heldout", type=int, default=300,
                   help="held-out utterances, voices never trained on (default %(default)s)")
    p.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--voices", choices=["default", "extra"], default="default",
                   help="training voice set: the default one, or the extra speakers (RHVoice, "
                   "festival) of the second data set")
    p.add_argument("--merge", nargs="+", metavar="DIR", default=None,
                   help="do not generate: join these data sets into --out (manifests only)")
    p.set_defaults(func=_data_stt)

    train = group_subparsers(subparsers, "train", "train models")
    p = train.add_parser("stt", help="train the streaming SSM recogniser (resumes from RUN/last.pt)")
    p.add_argument("--data", default="data/stt/v1", help="folder with train.tsv and heldout.tsv")
    p.add_argument("--run", default="runs/stt/v1", help="run folder (default %(default)s)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch-s", type=float, default=64.0, help="seconds of audio per batch")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--max-minutes", type=float, default=80.0,
                   help="training time budget; the LR schedule ends with it (default %(default)s)")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--export", metavar="DIR", default=None,
                   help="do not train: export RUN/best to DIR with a model card, then exit")
    p.add_argument("--commands", metavar="FILE", default=None,
                   help="with --export: a file holding the commands that made the model, for the card")
    p.set_defaults(func=_train_stt)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _data_stt(args: argparse.Namespace) -> int:
    from ..data.generate import GenerateConfig, generate, merge
    from ..data.voices import EXTRA_TRAIN_VOICES, TRAIN_VOICES

    _logging()
    if args.merge:
        print(json.dumps(merge(args.out, args.merge)["splits"], indent=2))
        return 0
    voices = EXTRA_TRAIN_VOICES if args.voices == "extra" else TRAIN_VOICES
    summary = generate(GenerateConfig(out_dir=args.out, n_train=args.train,
                                      n_heldout=args.heldout, workers=args.workers, seed=args.seed,
                                      train_voices=dict(voices)))
    print(json.dumps(summary["splits"], indent=2))
    return 0


def _train_stt(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    _logging()
    if args.export:
        from .export import export_run

        print(export_run(args.run, args.export, data_dir=args.data, command=args.commands))
        return 0
    from .train import TrainConfig, train

    cfg = TrainConfig(train_manifest=f"{args.data}/train.tsv",
                      heldout_manifest=f"{args.data}/heldout.tsv", run_dir=args.run,
                      d_model=args.d_model, conv_channels=args.d_model, n_layers=args.layers,
                      batch_audio_s=args.batch_s, lr=args.lr, max_steps=args.max_steps,
                      max_minutes=args.max_minutes, eval_every_steps=args.eval_every)
    res = train(cfg)
    print(json.dumps({k: v for k, v in res.items() if k != "examples"}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ssm_engine.stt.cli data stt ...`` before the commands are wired into parley."""
    parser = argparse.ArgumentParser(prog="python -m ssm_engine.stt.cli")
    register_cli(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
