"""Do the finals' rescoring weights, tuned on synthetic voices, suit people?

    .venv/bin/python benchmarks/bench_stt_rescoring.py [--model models/stt-ssm]
        [--lm-weights 0.4 0.8 1.2] [--word-bonuses 0 1 2 3 4] [--char-weights 0]
    .venv/bin/python benchmarks/bench_stt_rescoring.py --model models/stt/final \
        --lexicon-from models/stt --human data/stt/human2/half0.tsv --synthetic ''

The recogniser's finals pool both beam searches' n-best transcripts and pick one by
``lm_weight * ln P_LM + word_bonus * words`` beside the phone head's CTC score (``joint.py``); its
defaults (0.8, 4.0) were tuned on held-out *synthetic* voices. On people a WER above 1 on single
words says the finals insert words. This runs each clip's searches once (the model's log-probs
over the whole clip through the 8 kHz mu-law channel, 100 ms of flush silence after it, as the
engine does), then rescores the same pools under every pair of weights:

- the human development set split in two by clip (even / odd): each pair is scored on both
  halves, the best pair chosen on the even half and reported on the odd one (what the choice is
  worth on clips it was not chosen on), with the defaults beside it;
- the synthetic development set of held-out voices (``--synthetic``, default data/stt/dev-b, 150
  clips; never trained on) under the defaults and the chosen pair: what the callers' sentences
  in unseen voices lose or gain.

The pool itself (the searches' proposals, BeamConfig's own word bonus) stays as shipped. With
``--model`` a final-pass model (``models/stt/final``: trained on whole utterances), each clip is
encoded whole as the engine's final pass does (``utterance_log_probs``, no flush), with the LM and
lexicon of ``--lexicon-from``. ``--synthetic ''`` skips the synthetic set. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from harness.stt_eval import phone_channel  # noqa: E402
from pipeline.audio.wav import read_wav  # noqa: E402
from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, LEXICON_FILE, LM_FILE  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.decode import cer, wer  # noqa: E402
from ssm_engine.stt.encoder_model import WhisperSTTModel  # noqa: E402
from ssm_engine.stt.joint import JointConfig, JointDecoder, JointSearch  # noqa: E402
from ssm_engine.stt.lm import NGramLM  # noqa: E402
from ssm_engine.stt.model import STTModel  # noqa: E402
from ssm_engine.stt.recognizers import load_recognizer  # noqa: E402
from ssm_engine.stt.phones import Pronouncer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

RATE = 8000
FLUSH_S = 0.1


def decoders(model: STTModel | WhisperSTTModel, search: JointSearch, manifest: str
             ) -> tuple[list[JointDecoder], list[str], list[str]]:
    """Each clip's searches, run once -> (decoders ready to rescore, references, voices)."""
    voice_file = Path(manifest).with_name(Path(manifest).stem + "_voices.tsv")
    voice_of = {str(p): v for p, v in read_manifest(voice_file)} if voice_file.exists() else {}
    out, refs, voices = [], [], []
    for path, text in read_manifest(manifest):
        pcm, rate = read_wav(path)
        x = phone_channel(pcm, rate, RATE, "mulaw").astype(np.float32) / 32768.0
        if isinstance(model, WhisperSTTModel):     # the final pass: the utterance encoded whole
            rows = model.utterance_log_probs(torch.from_numpy(x)[None])
        else:
            x = np.concatenate([x, np.zeros(int(FLUSH_S * RATE), np.float32)])
            step = model.config.step_samples
            x = np.pad(x, (0, -len(x) % step))
            with torch.no_grad():
                chars, phones = model.forward_heads(torch.from_numpy(x)[None])
            rows = torch.cat([torch.log_softmax(chars[0], -1), torch.log_softmax(phones[0], -1)], -1)
        dec = search.stream()
        dec.push(rows)
        out.append(dec)
        refs.append(normalize_text(text))
        voices.append(voice_of.get(str(path), "").split(":")[0])
    return out, refs, voices


def rescored(search: JointSearch, decs: list[JointDecoder], config: JointConfig) -> list[str]:
    search.config = config
    return [(d.nbest(1) or [("", 0.0)])[0][0] for d in decs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    ap.add_argument("--human", default="data/stt/human/human.tsv")
    ap.add_argument("--synthetic", default="data/stt/dev-b/heldout.tsv")
    ap.add_argument("--lm-weights", type=float, nargs="+", default=[0.4, 0.8, 1.2])
    ap.add_argument("--word-bonuses", type=float, nargs="+", default=[0.0, 1.0, 2.0, 3.0, 4.0])
    ap.add_argument("--char-weights", type=float, nargs="+", default=[0.0],
                    help="weights of the character head's score beside the phone head's")
    ap.add_argument("--lexicon-from", default=None,
                    help="the folder of lm.arpa.gz and lexicon.dict.gz (default: --model)")
    args = ap.parse_args(argv)
    for manifest in (args.human, args.synthetic):
        if manifest and not Path(manifest).exists():
            ap.error(f"{manifest} is missing (parley data human; parley data stt, see the model card)")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    model = load_recognizer(args.model).eval()
    files = Path(args.lexicon_from or args.model)
    lm = NGramLM.load(files / LM_FILE)
    search = JointSearch(lm, Pronouncer.load(files / LEXICON_FILE, words=lm.vocab))
    default = search.config
    human, refs, sources = decoders(model, search, args.human)
    synth, synth_refs, _ = decoders(model, search, args.synthetic) if args.synthetic else ([], [], [])
    halves = {"even": list(range(0, len(human), 2)), "odd": list(range(1, len(human), 2))}

    def score(hyps: list[str], idx: list[int]) -> float:
        return wer([refs[i] for i in idx], [hyps[i] for i in idx])

    grid = []
    for lw, wb, cw in itertools.product(args.lm_weights, args.word_bonuses, args.char_weights):
        hyps = rescored(search, human, dataclasses.replace(default, lm_weight=lw, word_bonus=wb,
                                                           char_weight=cw))
        grid.append({"lm_weight": lw, "word_bonus": wb, "char_weight": cw, "wer_even": round(score(hyps, halves["even"]), 4),
                     "wer_odd": round(score(hyps, halves["odd"]), 4),
                     "words_per_ref_word": round(sum(len(h.split()) for h in hyps)
                                                 / sum(len(r.split()) for r in refs), 3)})
    best = min(grid, key=lambda g: (g["wer_even"], abs(g["word_bonus"] - default.word_bonus)))
    chosen = dataclasses.replace(default, lm_weight=best["lm_weight"], word_bonus=best["word_bonus"],
                                 char_weight=best["char_weight"])
    report = {}
    for name, cfg in (("default", default), ("chosen", chosen)):
        hyps = rescored(search, human, cfg)
        syn = rescored(search, synth, cfg)
        by_source = {s: round(wer([r for r, src in zip(refs, sources) if src == s],
                                  [h for h, src in zip(hyps, sources) if src == s]), 3)
                     for s in sorted(set(sources))}
        report[name] = {"lm_weight": cfg.lm_weight, "word_bonus": cfg.word_bonus,
                        "char_weight": cfg.char_weight,
                        "human_wer": round(wer(refs, hyps), 4), "human_cer": round(cer(refs, hyps), 4),
                        "human_wer_odd": round(score(hyps, halves["odd"]), 4),
                        "human_by_source": by_source,
                        "synthetic_wer": round(wer(synth_refs, syn), 4) if synth else None,
                        "synthetic_cer": round(cer(synth_refs, syn), 4) if synth else None}
    print(json.dumps({"bench": "stt_rescoring", "git": git_sha(), "model": args.model,
                      "human_clips": len(human), "synthetic_clips": len(synth),
                      "chosen_on": "even clips", "reported_on": "odd clips",
                      "odd_wer_ratio_chosen_to_default": round(
                          report["chosen"]["human_wer_odd"] / report["default"]["human_wer_odd"], 3),
                      "default": report["default"], "chosen": report["chosen"], "grid": grid,
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
