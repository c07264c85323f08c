"""Where do the recogniser's held-out errors come from: callers' sentences or filler?

Question: the held-out set mixes two kinds of sentence from the text generator
(``ssm_engine/data/texts.py``): caller-style ones (names, numbers, dates, addresses, yes/no,
account and order talk) and, about one in eight, Faker's filler (random common English words,
"experience want reality section"). How do WER and CER split between them, per voice?

Input: the ``--hyps`` file of a ``parley eval stt`` run on a manifest written by ``parley data
stt`` (its ``summary.json`` gives the seed; the sentences are drawn again to tag each one with
its kind). Each engine or model is its own eval run; pass several to compare them side by side.

    parley eval stt --manifest data/stt/v1/heldout.tsv --json --hyps /tmp/ssm.tsv
    parley eval stt --engine whisper --manifest data/stt/v1/heldout.tsv --json --hyps /tmp/w.tsv
    .venv/bin/python benchmarks/bench_stt_errors.py --data data/stt/v1 /tmp/ssm.tsv /tmp/w.tsv

Prints one JSON line: per hyps file, per kind (and per kind and voice), utterances, reference
words, WER and CER.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ssm_engine.data.generate import HELDOUT_SEED_OFFSET, faker_version  # noqa: E402
from ssm_engine.data.texts import SentenceGenerator  # noqa: E402
from ssm_engine.stt.decode import cer, wer  # noqa: E402


def sentence_kinds(data_dir: Path, split: str = "heldout") -> dict[str, str]:
    """Each sentence of the data set's ``split`` -> "caller" or "filler", drawn again from its
    seed."""
    summary = json.loads((data_dir / "summary.json").read_text())
    if "merged_from" in summary:
        raise SystemExit(f"{data_dir} is a merge; pass the data set that generated the split")
    cfg = summary["config"]
    # (summaries before the Faker pin do not say; split_errors still refuses a sentence it
    # cannot find, so a data set drawn with another Faker fails there)
    if "faker" in summary and summary["faker"] != faker_version():
        raise SystemExit(f"{data_dir} was written with Faker {summary.get('faker')}, this is "
                         f"{faker_version()}: its sentences cannot be drawn again")
    n = cfg["n_heldout"] if split == "heldout" else cfg["n_train"]
    seed = cfg["seed"] + (HELDOUT_SEED_OFFSET if split == "heldout" else 0)
    gen = SentenceGenerator(seed)
    kinds: dict[str, str] = {}
    for _ in range(n):
        text = gen.sentence()
        # a sentence drawn twice as both kinds would be ambiguous: filler wins (it never is)
        if kinds.get(text) != "filler":
            kinds[text] = gen.last_kind
    return kinds


def split_errors(rows: list[list[str]], kinds: dict[str, str]) -> dict:
    """Rows of a --hyps file (path, voice, errors, words, ref, hyp) -> scores per kind and per
    kind and voice."""
    groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for _path, voice, _errors, _words, ref, hyp in rows:
        kind = kinds.get(ref)
        if kind is None:
            raise SystemExit(f"reference {ref!r} is not a sentence of this data set")
        for key in ("all", kind, f"{kind}/{voice}"):
            groups[key].append((ref, hyp))
    out = {}
    for key in sorted(groups, key=lambda k: (k != "all", "/" in k, k)):
        refs = [r for r, _ in groups[key]]
        hyps = [h for _, h in groups[key]]
        out[key] = {"n": len(refs), "words": sum(len(r.split()) for r in refs),
                    "wer": round(wer(refs, hyps), 4), "cer": round(cer(refs, hyps), 4)}
    errs = {k: v["wer"] * v["words"] for k, v in out.items() if "/" not in k}
    if errs.get("all"):
        for kind in ("caller", "filler"):
            if kind in out:
                out[kind]["share_of_word_errors"] = round(errs[kind] / errs["all"], 3)
    return out


def read_hyps(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t")[:2] != ["path", "voice"]:
        raise SystemExit(f"{path}: not a parley eval stt --hyps file")
    rows = [line.split("\t") for line in lines[1:]]
    bad = [i for i, r in enumerate(rows, 2) if len(r) != 6]
    if bad:
        raise SystemExit(f"{path}: line {bad[0]} does not have 6 fields")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("hyps", nargs="+", type=Path, help="--hyps files of parley eval stt runs")
    ap.add_argument("--data", type=Path, default=Path("data/stt/v1"),
                    help="the data set the manifest came from (default %(default)s)")
    args = ap.parse_args()
    kinds = sentence_kinds(args.data)
    out = {"bench": "stt_errors", "data": str(args.data), "faker": faker_version(),
           "results": {str(p): split_errors(read_hyps(p), kinds) for p in args.hyps}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
