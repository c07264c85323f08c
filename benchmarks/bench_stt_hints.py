"""Do per-turn hints help the recogniser hear yes/no, digit strings and names, and at what risk?

    .venv/bin/python benchmarks/bench_stt_hints.py [--voices flite:slt espeak:en-us+f3] [--n 4]

Callers' answers to the agent's three commonest questions ("Is that right?", "What is your
number?", "May I have your name?") are spoken by voices the recogniser never trained on (the
held-out voices), through the 8 kHz mu-law phone channel, and by the people of the human
development set where it has such answers (its digit strings). Each clip is decoded twice by the
shipped recogniser, in one run: free (the baseline) and with the turn's hint (``yes_no``,
``digits`` or ``name``); where Whisper's decoder makes the finals and the hint gives it a prompt
(``whisper_final.whisper_prompt``: yes/no, digits), also hinted without that prompt
(``hinted_no_prompt``). Reported per kind:

- yes/no: the agent's reading (``agent.slots.yes_or_no``) of the final is the one meant;
- digits: every digit right (``agent.slots.digits_in``), and the digit error rate;
- names: the name the agent takes from the final (``agent.slots.extract("name", ...)``) is the
  one said, spelled as said; the names are drawn by how common they are (US Census shares, the
  table the name hint searches, so the draw is callers' names, not the hint's tuning), half of
  them given in a carrier ("my name is ...", "it's ...", "this is ..."), half bare;
- spelled names: the same names spelled letter by letter, as the agent asks for a name it did
  not get ("dee, eigh, vee, eye, dee. em, ...": ``harness.callers.script.spelled_out``), under
  the hint the agent then gives (``spelling`` and ``name``): the name the agent takes is the one
  spelled; and the same decoded in pieces cut at each pause of 200 ms (``spelled_in_pieces``: one
  utterance per VAD segment, as before the recogniser's stream spanned a spelling's pauses);
- open sentences decoded under a yes/no hint, a name hint and a digits hint (a caller who asks
  something else instead; the order line listens for digits on its first turn): how many turn
  into a yes or a no, a hinted name or a digit string (must stay near 0), and their WER beside
  the free decode; the yes/no answers under a name hint too (the receptionist's first turn
  listens for a name, as "my name is ..." starts a message): how many become a name;
- confidence: the final's posterior, mean on right and wrong answers, and how many wrong
  answers a 0.6 threshold would catch;
- cost: final latency (end of audio to final) p50/p95/p99 free and hinted.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha  # noqa: E402

from agent.slots import digits_in, extract, yes_or_no  # noqa: E402
from harness.callers.script import spelled_out  # noqa: E402
from pipeline.audio.g711 import ulaw_decode, ulaw_encode  # noqa: E402
from pipeline.engines import whisper_final  # noqa: E402
from pipeline.engines.ssm_recognizer import SSMSTTEngine  # noqa: E402
from pipeline.engines.whisper_final import whisper_prompt  # noqa: E402
from ssm_engine.data.audio import resample  # noqa: E402
from ssm_engine.data.voices import voice  # noqa: E402
from ssm_engine.stt.decode import edit_distance, wer  # noqa: E402
from ssm_engine.stt.hints import Hints  # noqa: E402
from ssm_engine.stt.names import NameTable  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

YES = ("yes", "yeah", "yes please", "that's right", "correct", "yep", "yes it is",
       "yes that's correct")
NO = ("no", "nope", "no thanks", "no that's wrong", "that's not right", "no it isn't",
      "no thank you", "incorrect")
OPEN = ("what are your opening hours", "can I leave a message", "where are you located",
        "I want to talk to a person", "do you take my insurance", "how much is a cleaning",
        "can I book an appointment", "my name is michael brown", "goodbye",
        "thank you goodbye", "what insurance do you accept")
_WORD = "zero one two three four five six seven eight nine".split()


def _digit_sentences(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """(spoken text, digits): 10-digit phone numbers read in groups of 3-3-4, some 7-digit."""
    out = []
    for i in range(n):
        k = 10 if i % 3 else 7
        d = "".join(str(rng.randrange(10)) for _ in range(k))
        groups = [d[:3], d[3:6], d[6:]] if k == 10 else [d[:3], d[3:]]
        spoken = ", ".join(" ".join("oh" if c == "0" and rng.random() < 0.3 else _WORD[int(c)]
                                    for c in g) for g in groups)
        out.append((spoken, d))
    return out


def _name_sentences(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """(spoken text, the name as the agent should write it): names drawn by how common they are."""
    table = NameTable.load()
    firsts, f_w = zip(*table.first.items())
    lasts, l_w = zip(*table.last.items())
    carriers = ("my name is {}", "it's {}", "this is {}", "{}")
    out = []
    for i in range(n):
        name = f"{rng.choices(firsts, f_w)[0]} {rng.choices(lasts, l_w)[0]}"
        out.append((carriers[i % len(carriers)].format(name), name.title()))
    return out


def _phone(x: np.ndarray, rate: int) -> np.ndarray:
    y = resample(x, rate, 8000)
    pcm = np.clip(np.round(y * 32767), -32768, 32767).astype(np.int16)
    pad = np.zeros(2400, np.int16)              # 0.3 s of silence around the answer
    return ulaw_decode(ulaw_encode(np.concatenate([pad, pcm, pad])))


def _pieces(pcm: np.ndarray, gap_ms: int = 200) -> list[np.ndarray]:
    """``pcm`` cut where it is quiet for ``gap_ms`` (the VAD's stop), each piece with 0.1 s of its
    own audio either side and 0.15 s of silence around it: a spelling as the recogniser heard it
    before its stream spanned the caller's pauses (one utterance per VAD segment). A stand-in for
    the VAD: 10 ms frames under 5 % of the loudest frame's level are quiet."""
    fr = 80
    level = np.array([np.sqrt(np.mean(pcm[i:i + fr].astype(np.float32) ** 2))
                      for i in range(0, len(pcm) - fr, fr)])
    loud = level > max(float(level.max()) * 0.05, 30.0)
    spans, start, quiet = [], None, 0
    for k, on in enumerate(loud):
        if on:
            start = k if start is None else start
            quiet = 0
        elif start is not None:
            quiet += 1
            if quiet * 10 >= gap_ms:
                spans.append((start, k - quiet + 1))
                start, quiet = None, 0
    if start is not None:
        spans.append((start, len(loud)))
    pad = np.zeros(1200, np.int16)
    return [np.concatenate([pad, pcm[max(0, a * fr - 800):b * fr + 800], pad]) for a, b in spans]


def _decode(engine: SSMSTTEngine, pcm: np.ndarray, hints: Hints, prompt: bool = True):
    if not prompt:                  # the hints without Whisper's prompt (``whisper_prompt``)
        with mock.patch.object(whisper_final, "whisper_prompt", lambda hints: ""):
            return _decode(engine, pcm, hints)
    utt = engine.open(8000, hints)
    for i in range(0, len(pcm), 160):
        fut = utt.push(pcm[i:i + 160])
        if fut is not None:
            utt.take(fut.result())
    t0 = time.perf_counter()
    utt.finish_sync()
    return utt.recognition, (time.perf_counter() - t0) * 1000.0


def _pct(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    return {f"p{q}": round(float(np.percentile(xs, q)), 2) for q in (50, 95, 99)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--voices", nargs="+", default=["flite:slt", "espeak:en-us+f3"])
    ap.add_argument("--n", type=int, default=6, help="digit strings per voice")
    ap.add_argument("--names", type=int, default=12, help="names per voice")
    ap.add_argument("--human", default="data/stt/human/human.tsv",
                    help="human development set (its digit strings join the digit test)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    nrng = np.random.default_rng(args.seed)
    clips: list[tuple[str, str, np.ndarray, str]] = []   # kind, truth, pcm, voice
    for name in args.voices:
        v = voice(name)
        for text in YES + NO:
            x, rate = v.synthesize(text, nrng)
            clips.append(("yes_no", "yes" if text in YES else "no", _phone(x, rate), name))
        for text in OPEN:
            x, rate = v.synthesize(text, nrng)
            clips.append(("open", normalize_text(text), _phone(x, rate), name))
        for spoken, digits in _digit_sentences(rng, args.n):
            x, rate = v.synthesize(spoken, nrng)
            clips.append(("digits", digits, _phone(x, rate), name))
        for spoken, person in _name_sentences(rng, args.names):
            x, rate = v.synthesize(spoken, nrng)
            clips.append(("name", person, _phone(x, rate), name))
            x, rate = v.synthesize(spelled_out(person), nrng)
            clips.append(("spelled", person, _phone(x, rate), name))
    human = Path(args.human)
    if human.exists():
        from ssm_engine.data.manifest import read_manifest
        from ssm_engine.data.audio import read_wav
        for path, text in read_manifest(human):
            ws = normalize_text(text).split()
            if len(ws) >= 2 and all(w in _WORD or w == "oh" for w in ws):
                x, rate = read_wav(path)
                clips.append(("digits", digits_in(text), _phone(x, rate), "human"))
    engine = SSMSTTEngine(compile=False)
    try:
        _decode(engine, clips[0][2][:4000], Hints())                    # warm-up
        rows = []
        in_pieces: list[tuple[str, str, str, int]] = []    # truth, voice, heard, pieces
        for kind, truth, pcm, name in clips:
            free, free_ms = _decode(engine, pcm, Hints())
            # a yes or a no also under a name hint: the receptionist's first turn listens for
            # a name ("my name is ...") and a short answer must not become one
            for hint_kind in {"digits": ("digits",), "name": ("name",), "spelled": ("spelling",),
                              "open": ("yes_no", "name", "digits")}.get(kind, ("yes_no", "name")):
                expect = {hint_kind, "name"} if hint_kind == "spelling" else {hint_kind}
                hinted, hinted_ms = _decode(engine, pcm, Hints(expect=frozenset(expect)))
                bare, bare_ms = ((_decode(engine, pcm, Hints(expect=frozenset(expect)), prompt=False)
                                  if whisper_prompt(Hints(expect=frozenset(expect)))
                                  and engine.final_whisper is not None else (hinted, hinted_ms)))
                row_kind = (f"open_{hint_kind}" if kind == "open"
                            else "short_name" if kind == "yes_no" and hint_kind == "name"
                            else kind)
                rows.append((row_kind, truth, name, free, free_ms, hinted, hinted_ms, bare, bare_ms))
            if kind == "spelled":      # the same spelling decoded in pieces, cut at its pauses
                pieces = [_decode(engine, p, Hints(expect=frozenset(expect)))[0].text
                          for p in _pieces(pcm)]
                in_pieces.append((truth, name, " ".join(pieces), len(pieces)))
    finally:
        engine.close()

    def yn(text: str) -> str:
        a = yes_or_no(text)
        return "none" if a is None else ("yes" if a else "no")

    out: dict = {"bench": "stt_hints", "voices": args.voices, "clips": len(rows)}
    for mode in ("free", "hinted", "hinted_no_prompt"):
        i = {"free": 3, "hinted": 5, "hinted_no_prompt": 7}[mode]
        ynr = [r for r in rows if r[0] == "yes_no"]
        dr = [r for r in rows if r[0] == "digits"]
        opr = [r for r in rows if r[0] == "open_yes_no"]
        onr = [r for r in rows if r[0] == "open_name" and extract("name", r[1]) is None]
        snr = [r for r in rows if r[0] == "short_name"]
        odr = [r for r in rows if r[0] == "open_digits"]
        nr = [r for r in rows if r[0] == "name"]
        name_ok = [extract("name", r[i].text) == r[1] for r in nr]
        spr = [r for r in rows if r[0] == "spelled"]
        spelled_ok = [extract("name", r[i].text) == r[1] for r in spr]
        right = [yn(r[i].text) == r[1] for r in ynr]
        digit_ok = [digits_in(r[i].text) == r[1] for r in dr]
        der = (sum(edit_distance(list(r[1]), list(digits_in(r[i].text))) for r in dr)
               / max(1, sum(len(r[1]) for r in dr)))
        confs = [(r[i].confidence, ok) for r, ok in zip(ynr + dr, right + digit_ok)
                 if r[i].confidence is not None]
        wrong = [c for c, ok in confs if not ok]
        out[mode] = {
            "yes_no_right": round(sum(right) / max(1, len(right)), 3), "yes_no_n": len(right),
            "digits_exact": round(sum(digit_ok) / max(1, len(digit_ok)), 3),
            "digits_n": len(digit_ok), "digit_error_rate": round(der, 3),
            "human_digits_exact": [digits_in(r[i].text) == r[1] for r in dr if r[2] == "human"],
            "names_exact": round(sum(name_ok) / max(1, len(name_ok)), 3), "names_n": len(nr),
            "names_wrong": [f"{r[1]} ({r[2]}) -> {r[i].text!r}" for r, ok in zip(nr, name_ok)
                            if not ok][:8],
            "spelled_names_exact": round(sum(spelled_ok) / max(1, len(spelled_ok)), 3),
            "spelled_by_voice": {v: f"{sum(ok for r, ok in zip(spr, spelled_ok) if r[2] == v)}/"
                                    f"{sum(r[2] == v for r in spr)}"
                                 for v in dict.fromkeys(r[2] for r in spr)},
            "spelled_wrong": [f"{r[1]} ({r[2]}) -> {r[i].text!r}"
                              for r, ok in zip(spr, spelled_ok) if not ok][:8],
            "open_turned_yes_no": sum(yn(r[i].text) != "none" for r in opr),
            "open_n": len(opr),
            "open_taken_by_name_hint": sum(bool(r[i].hinted) for r in onr if mode != "free"),
            "open_name_n": len(onr),
            "yes_no_taken_by_name_hint": sum(bool(r[i].hinted) for r in snr if mode != "free"),
            "yes_no_name_n": len(snr),
            "open_taken_by_digits_hint": sum(bool(r[i].hinted) for r in odr if mode != "free"),
            "open_digits_n": len(odr),
            "open_wer": round(wer([r[1] for r in opr], [normalize_text(r[i].text) for r in opr]), 3),
            "confidence_right_mean": round(float(np.mean([c for c, ok in confs if ok] or [0])), 3),
            "confidence_wrong_mean": round(float(np.mean(wrong or [0])), 3),
            "wrong_caught_at_0.6": f"{sum(c < 0.6 for c in wrong)}/{len(wrong)}",
            "right_refused_at_0.6": sum(c < 0.6 for c, ok in confs if ok),
            "final_ms": _pct([r[i + 1] for r in rows
                              if mode != "free"
                              or r[0] not in ("open_name", "open_digits", "short_name")]),
            "yes_no_wrong": [f"{r[1]} ({r[2]}) -> {r[i].text!r} {r[i].confidence or 0:.2f}"
                             for r, ok in zip(ynr, right) if not ok],
        }
    ok = [extract("name", heard) == truth for truth, _, heard, _ in in_pieces]
    out["spelled_in_pieces"] = {
        "names_exact": round(sum(ok) / max(1, len(ok)), 3), "n": len(ok),
        "by_voice": {v: f"{sum(k for k, r in zip(ok, in_pieces) if r[1] == v)}/"
                        f"{sum(r[1] == v for r in in_pieces)}"
                     for v in dict.fromkeys(r[1] for r in in_pieces)},
        "pieces_p50": float(np.percentile([r[3] for r in in_pieces], 50)) if in_pieces else 0}
    out["examples"] = [{"truth": r[1], "free": r[3].text, "hinted": r[5].text,
                        "conf": round(r[5].confidence or 0, 2)} for r in rows
                       if r[3].text != r[5].text][:8]
    out["git"] = git_sha()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
