"""Letter-to-sound fallback for words missing from the lexicon: festival's own CMU LTS rules.

    predict("zyzzyva")   # -> ("z", "ih1", "z", "iy0", "v", "ax0")  (whatever festival would say)

Why these rules: the teacher voice uses exactly them for its out-of-vocabulary words, so our
phones for an unknown word are the phones the teacher said when it made the training data (no
mapping from another phone set, no second system at run time). They are CART trees, one per
letter, asking about the letters up to three to either side (``#`` marks the word's edges); each
leaf gives a phone with its stress digit, ``_epsilon_`` (silent letter) or a pair such as
``k-s``. This is festival's ``lts_predict`` (src/modules/Lexicon/lts.cc) re-implemented;
festival then only syllabifies, which we do not need. Characters other than a-z are dropped.

The trees ship as ``lts_rules.json.gz``, built from festival's file::

    python -m ssm_engine.tts.lts --build /usr/share/festival/dicts/cmu/cmu_lts_rules.scm

If a word has no letters at all, ``predict`` returns ``()``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import LexiconError

__all__ = ["predict", "build", "RULES_PATH"]

RULES_PATH = Path(__file__).with_name("lts_rules.json.gz")
_VOWELS = {"aa", "ae", "ah", "ao", "aw", "ax", "ay", "eh", "er", "ey", "ih", "iy", "ow", "oy",
           "uh", "uw"}


def _parse_sexpr(text: str) -> Any:
    tokens = re.findall(r"\(|\)|[^\s()]+", re.sub(r";[^\n]*", "", text))
    stack: list[list] = [[]]
    for tok in tokens:
        if tok == "(":
            stack.append([])
        elif tok == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    return stack[0]


def _compact(node: list) -> Any:
    """Wagon node -> [feature_offset, value_set, yes, no] or a leaf string."""
    if len(node) == 1:                      # leaf: ((distribution ...) class)
        return node[0][-1]
    (feat, op, value), yes, no = node
    m = re.fullmatch(r"((?:[pn]\.)*)name", feat)
    if m is None or op not in ("is", "in"):
        raise LexiconError(f"unsupported LTS question {feat} {op} {value}")
    steps = m.group(1).split(".")[:-1] if m.group(1) else []
    offset = sum(-1 if s == "p" else 1 for s in steps)
    values = value if isinstance(value, list) else [value]
    return [offset, values, _compact(yes), _compact(no)]


def build(source: Path, out: Path = RULES_PATH) -> int:
    """Converts festival's ``cmu_lts_rules.scm`` to ``out``; returns the number of letters."""
    try:
        text = source.read_text(encoding="latin-1")
    except OSError as exc:
        raise LexiconError(f"cannot read festival's LTS rules {source} (Debian package "
                           f"festlex-cmu): {exc}") from exc
    body = text[text.index("(set! cmu_lts_rules"):]
    parsed = _parse_sexpr(body.replace("'(", "("))[0]      # (set! cmu_lts_rules (...))
    rules = parsed[2]
    trees = {letter: _compact(tree) for letter, tree in rules}
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(trees, f, separators=(",", ":"))
    return len(trees)


@lru_cache(maxsize=1)
def _trees() -> dict[str, Any]:
    try:
        with gzip.open(RULES_PATH, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, EOFError, ValueError) as exc:
        raise LexiconError(f"cannot read the LTS rules {RULES_PATH}: {exc}") from exc


def predict(word: str) -> tuple[str, ...]:
    """Phones (vowels with a stress digit) festival's LTS rules give ``word``."""
    letters = ["#"] + [c for c in word.lower() if "a" <= c <= "z"] + ["#"]
    if len(letters) == 2:
        return ()
    trees = _trees()
    phones: list[str] = []
    for i in range(1, len(letters) - 1):
        node = trees.get(letters[i])
        if node is None:
            continue
        while not isinstance(node, str):
            offset, values, yes, no = node
            j = i + offset
            name = letters[j] if 0 <= j < len(letters) else "0"
            node = yes if name in values else no
        if node == "_epsilon_":
            continue
        for p in node.split("-"):
            phones.append(p + "0" if p in _VOWELS else p)
    return tuple(phones)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ssm_engine.tts.lts",
                                description="build the packaged LTS rules from festival's")
    p.add_argument("--build", type=Path, required=True, metavar="FILE",
                   help="festival's cmu_lts_rules.scm")
    p.add_argument("--out", type=Path, default=RULES_PATH)
    args = p.parse_args(argv)
    n = build(args.build, args.out)
    print(f"{n} letters -> {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
