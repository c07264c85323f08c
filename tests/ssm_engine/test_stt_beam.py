"""The word LM (Kneser-Ney, ARPA round trip) and the CTC prefix beam search on hand-built
posteriors: the LM breaks acoustic ties, names outside the lexicon still come through, and
streaming equals whole-clip decoding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ssm_engine import BatchRunner
from ssm_engine.stt.beam import BeamConfig, CTCBeamSearch
from ssm_engine.stt.decode import greedy_decode
from ssm_engine.stt.lm import BOS, EOS, UNK, LMFormatError, NGramLM, build_lm, read_unigrams
from ssm_engine.stt.stream import RecognizerStream
from ssm_engine.stt.text import VOCAB

from .test_stt_model import speechy, tiny_model
from ssm_engine.errors import ConfigError

CORPUS = ["i want to pay my bill", "can i pay my bill today", "my bill is wrong",
          "please pay the bill", "my name is anna", "my name is john smith", "yes please",
          "no thanks", "i want to cancel my order"]


def posteriors(spec: list[str | dict[str, float]], floor: float = 1e-6) -> torch.Tensor:
    """Frames of CTC log-probs: "a" -> 'a' at 0.98; "_" -> blank at 0.9999; a dict gives the
    probabilities of its characters; whatever is left goes to the blank."""
    rows = []
    for item in spec:
        probs = np.full(len(VOCAB), floor)
        dist = {"_": 0.9999} if item == "_" else ({item: 0.98} if isinstance(item, str) else item)
        for ch, p in dist.items():
            probs[VOCAB.index(ch)] = p
        probs[0] = max(probs[0], 1.0 - sum(v for k, v in dist.items() if k != "_")) \
            if item != "_" else probs[0]
        rows.append(np.log(probs / probs.sum()))
    return torch.tensor(np.array(rows), dtype=torch.float32)


def spell(text: str) -> list[str | dict[str, float]]:
    """Clean posteriors for ``text``: each character once, blanks between."""
    out: list[str | dict[str, float]] = ["_"]
    for ch in text:
        out += [ch, "_"]
    return out + ["_"]


@pytest.fixture(scope="module")
def lm() -> NGramLM:
    return build_lm(CORPUS, general_words={"pill": 1.0, "the": 5.0, "ocean": 1.0})


def test_kneser_ney_distributions_sum_to_one(lm):
    words = sorted(lm.vocab) + [EOS, UNK]
    for ctx in [(), (BOS,), ("my",), ("pay", "my"), ("no", "such"), (BOS, "zork")]:
        total = sum(math.exp(lm.logp(w, ctx)) for w in words)
        assert total == pytest.approx(1.0, abs=1e-6), ctx
    assert lm.logp("bill", ("pay", "my")) > lm.logp("pill", ("pay", "my"))
    assert lm.logp("zork", ("my",)) == lm.logp(UNK, ("my",))      # unknown words are <unk>
    assert "pill" in lm and "zork" not in lm                        # general words join the lexicon


def test_arpa_round_trip_keeps_every_score(lm, tmp_path):
    for name in ("lm.arpa", "lm.arpa.gz"):
        back = NGramLM.load(lm.write_arpa(tmp_path / name))
        assert back.order == 3 and back.vocab == lm.vocab
        for ctx, w in [(("pay", "my"), "bill"), (("my",), "name"), ((), "the"), (("x",), "y")]:
            assert back.logp(w, ctx) == pytest.approx(lm.logp(w, ctx), abs=1e-3)
    uni = read_unigrams(tmp_path / "lm.arpa", top_k=3)
    assert len(uni) == 3 and "the" in uni and all(0 < p < 1 for p in uni.values())


def test_bad_lm_files_are_named(tmp_path):
    with pytest.raises(LMFormatError, match="missing.arpa"):
        NGramLM.load(tmp_path / "missing.arpa")
    bad = tmp_path / "bad.arpa"
    bad.write_text("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\tthe\tx\ty\n")
    with pytest.raises(LMFormatError, match="bad.arpa:5"):
        NGramLM.load(bad)
    with pytest.raises(ConfigError):
        build_lm([])


def test_general_weight_zero_leaves_the_general_words_out():
    lm = build_lm(CORPUS, general_words={"pill": 1.0, "ocean": 1.0}, general_weight=0.0)
    assert "ocean" not in lm and lm.logp("ocean", ()) == lm.logp(UNK, ())
    assert sum(math.exp(lm.logp(w, ())) for w in sorted(lm.vocab) + [EOS, UNK]) \
        == pytest.approx(1.0, abs=1e-6)


def test_lm_breaks_an_acoustic_tie_that_greedy_gets_wrong(lm):
    # "pay my ?ill": the acoustics lean to "p" (0.5 vs 0.45); the LM knows "pay my bill"
    spec = spell("pay my ")[:-1] + [{"p": 0.5, "b": 0.45}, "_"] + spell("ill")[1:]
    lp = posteriors(spec)
    assert greedy_decode(lp) == "pay my pill"
    search = CTCBeamSearch(lm, BeamConfig())
    assert search.decode(lp) == "pay my bill"
    # with no language weight the acoustics decide again
    assert CTCBeamSearch(lm, BeamConfig(lm_weight=0.0, word_bonus=0.0)).decode(lp) == "pay my pill"


def test_a_name_outside_the_lexicon_comes_through_spelled(lm):
    lp = posteriors(spell("my name is zork"))
    search = CTCBeamSearch(lm, BeamConfig())
    assert search.decode(lp) == "my name is zork"
    # ... but a weakly heard one loses to a lexicon word (the penalty at work)
    weak = spell("my name is ")[:-1] + [{"a": 0.6}, "_", {"n": 0.6}, "_", {"n": 0.6}, "_",
                                        {"a": 0.33, "e": 0.38}, "_", "_"]
    assert greedy_decode(posteriors(weak)) == "my name is anne"
    assert search.decode(posteriors(weak)) == "my name is anna"


def test_streaming_in_pieces_equals_whole_clip_and_skips_blank_frames(lm):
    lp = posteriors(["_"] * 20 + spell("i want to cancel my order") + ["_"] * 20)
    search = CTCBeamSearch(lm, BeamConfig())
    dec = search.stream()
    for i in range(0, len(lp), 7):
        dec.push(lp[i:i + 7])
    assert dec.finalize() == search.decode(lp) == "i want to cancel my order"
    assert dec.frames == len(lp) and dec.skipped >= 40 + 25      # silence and the gaps


def test_beam_settings_are_checked():
    with pytest.raises(ConfigError):
        BeamConfig(beam_size=0)
    with pytest.raises(ConfigError):
        BeamConfig(blank_skip=0.0)


def test_recognizer_stream_final_is_the_beam_over_everything_it_heard(lm):
    model = tiny_model()
    audio = (speechy(40)[0].numpy() * 32767).astype(np.int16)
    search = CTCBeamSearch(lm, BeamConfig(char_min_prob=0.02))
    with BatchRunner(model) as runner:
        rs = RecognizerStream(runner, model.config, flush_s=0.1, beam=search)
        taken = []
        for i in range(0, audio.size, 500):
            fut = rs.push(audio[i:i + 500])
            if fut is not None:
                taken.append(fut.result())
                rs.take(taken[-1])
        assert rs.final_text is None and rs.text == rs.decoder.text   # partials are greedy
        taken.append(rs.finish().result())
        assert rs.take(taken[-1]) and rs.final_text is not None
    assert rs.text == rs.final_text == search.decode(torch.cat(taken))
