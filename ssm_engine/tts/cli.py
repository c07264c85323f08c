"""Command line: ``parley data tts`` (make the teacher data set), ``parley train tts`` (train,
export).

    from ssm_engine.tts.cli import register_cli
    register_cli(subparsers)      # adds "data tts" and "train tts" under an argparse subparsers

The command nests under the shared ``data`` group (``ssm_engine.stt.cli.group_subparsers``), so
``train tts`` can sit beside ``train stt``. The leaf sets ``func(args) -> int``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from ..stt.cli import group_subparsers

__all__ = ["register_cli"]

DEFAULT_TRAIN = 2400      # about 2 hours of teacher audio (agent sentences average ~3 s)


def register_cli(subparsers: Any) -> None:
    data = group_subparsers(subparsers, "data", "generate training data")
    p = data.add_parser("tts", help="text-to-speech teacher data: agent sentences said by "
                        "a teacher voice (festival's slt HTS voice or Piper's joe), with "
                        "per-phone durations")
    p.add_argument("--teacher", default="festival", choices=("festival", "piper:joe"),
                   help="the voice to distil: festival (slt, female, festival + "
                   "festvox-us-slt-hts) or piper:joe (neural, male; the [data] extra) "
                   "(default %(default)s)")
    p.add_argument("--out", default="data/tts/v1", help="output folder (default %(default)s)")
    p.add_argument("--train", type=int, default=DEFAULT_TRAIN,
                   help="training utterances (default %(default)s, about 2 hours)")
    p.add_argument("--heldout", type=int, default=100,
                   help="held-out utterances, sentences never in train (default %(default)s)")
    p.add_argument("--workers", type=int, default=1, help="processes (default %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--broad", type=float, default=0.0, metavar="F",
                   help="share of the training sentences drawn from broader English instead of "
                   "the agent's templates: half a caller's (Faker's names, streets, cities, "
                   "numbers), half conversational English sampled from pocketsphinx's en-us "
                   "trigram model; held-out sentences stay the agent's (default %(default)s)")
    p.add_argument("--merge", nargs="+", metavar="DIR", default=None,
                   help="instead of generating, join these data sets of one teacher into --out "
                   "(training sentences that are another set's held-out ones are left out)")
    p.set_defaults(func=_data_tts)
    register_train_cli(subparsers)


def _data_tts(args: argparse.Namespace) -> int:
    from .dataset import DatasetConfig, generate, merge

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.merge:
        merged = merge(args.out, args.merge)
        print(json.dumps({k: merged[k] for k in ("splits", "dropped")}))
        return 0
    broad: dict = {}
    if args.broad:      # DatasetConfig checks the share
        from ..stt.cli import NATURAL_TOP, _natural_sampler

        broad = {"broad": args.broad, "broad_sampler": _natural_sampler(NATURAL_TOP),
                 "broad_source": f"pocketsphinx en-us trigram, {NATURAL_TOP} commonest words"}
    summary = generate(DatasetConfig(out_dir=args.out, n_train=args.train,
                                     n_heldout=args.heldout, workers=args.workers,
                                     seed=args.seed, teacher=args.teacher, **broad))
    print(json.dumps({k: summary[k] for k in ("splits", "failed", "wall_s")}))
    return 0 if summary["splits"].get("train", {}).get("utterances", 0) or not args.train else 1


def register_train_cli(subparsers: Any) -> None:
    """``parley train tts``: train the voice, or export a run as the shipped voice."""
    train = group_subparsers(subparsers, "train", "train models")
    p = train.add_parser(
        "tts", help="train the streaming SSM voice on `parley data tts` output (resumes from RUN/last.pt)",
        description="Train the streaming SSM voice: phone encoder, duration predictor and a causal "
        "Mamba-2 acoustic stack that predicts vocoder features, on one CPU thread. Resumable: run "
        "the same command again to continue from RUN/last.pt. Then ship it with --export.",
        epilog="example: parley data tts --out data/tts/v1 && parley train tts --data data/tts/v1 "
        "--run runs/tts/v1 --max-minutes 60 && parley train tts --run runs/tts/v1 --data "
        "data/tts/v1 --export models/tts")
    p.add_argument("--data", default="data/tts/v1", help="folder with train.jsonl, heldout.jsonl, wav/")
    p.add_argument("--run", default="runs/tts/v1", help="run folder (default %(default)s)")
    p.add_argument("--d-model", type=int, default=192)
    p.add_argument("--layers", type=int, default=4, help="acoustic Mamba-2 layers (default %(default)s)")
    p.add_argument("--batch-frames", type=int, default=8000, help="padded 10 ms frames per batch")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--max-minutes", type=float, default=60.0,
                   help="training time budget; the LR schedule ends with it (default %(default)s)")
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--envelope-loss", choices=("cepstrum", "spectrum"), default="cepstrum",
                   help="cepstrum: L1 on each normalised cepstral coefficient (every coefficient "
                   "alike); spectrum: L1 on the log envelope at mel-spaced frequencies, weighted "
                   "to the phone band (each coefficient by what it changes in the sound) "
                   "(default %(default)s)")
    p.add_argument("--init-from", metavar="VOICE", default=None,
                   help="fine-tune a voice folder (e.g. models/tts-joe) instead of starting from "
                   "scratch; its sizes replace --d-model/--layers")
    p.add_argument("--grow-layers", type=int, default=0, metavar="N",
                   help="with --init-from: add N acoustic layers on top of the voice's, each "
                   "starting as a no-op (its output projection zero), so the fine-tune starts from "
                   "the voice as it speaks and gains capacity (default %(default)s)")
    p.add_argument("--export", metavar="DIR", default=None,
                   help="do not train: export RUN/best to DIR with a model card and samples, then exit")
    p.add_argument("--checkpoint", choices=("best", "last"), default="best",
                   help="with --export: the checkpoint with the lowest held-out loss, or the "
                   "run's last (choose by listening tests, e.g. `parley eval tts`) (default %(default)s)")
    p.add_argument("--commands", metavar="FILE", default=None,
                   help="with --export: a file holding the commands that made the voice, for the card")
    p.set_defaults(func=_train_tts)


def _train_tts(args: argparse.Namespace) -> int:
    from .errors import TTSError

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.export:
            from .export import export_voice

            out = export_voice(args.run, args.export, data_dir=args.data, command=args.commands,
                               checkpoint=args.checkpoint)
            print(json.dumps({"exported": str(out)}))
            return 0
        from .train import TTSTrainConfig, train

        if args.grow_layers < 0 or (args.grow_layers and not args.init_from):
            raise TTSError("--grow-layers N takes N >= 0 and needs --init-from (the voice to grow)")
        cfg = TTSTrainConfig(data_dir=args.data, run_dir=args.run, d_model=args.d_model,
                             n_layers=args.layers, batch_frames=args.batch_frames, lr=args.lr,
                             max_steps=args.max_steps, max_minutes=args.max_minutes,
                             eval_every_steps=args.eval_every, envelope_loss=args.envelope_loss,
                             init_from=args.init_from, grow_layers=args.grow_layers)
        print(json.dumps(train(cfg)))
    except TTSError as exc:
        print(f"parley train tts: {exc}", file=sys.stderr)
        return 2
    return 0
