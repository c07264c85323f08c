"""Keyword spotting on the phone head: found anywhere, scored against the free path, and the
vectorised search equal to a plain one written from the definition."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from ssm_engine.errors import ConfigError
from ssm_engine.stt.beam import BeamConfig
from ssm_engine.stt.hints import Hints
from ssm_engine.stt.joint import JointConfig, JointSearch
from ssm_engine.stt.lm import build_lm
from ssm_engine.stt.phones import PHONE_BLANK, PHONES, WORD_BOUNDARY, Pronouncer
from ssm_engine.stt.spotting import KeywordSpotter, SpotConfig

from .test_stt_phones import both, posteriors, say

WORDS = {"parking": ["P AA R K IH NG"], "insurance": ["IH N SH UH R AH N S"],
         "is": ["IH Z"], "there": ["DH EH R"], "take": ["T EY K"], "a": ["AH", "EY"],
         "message": ["M EH S AH JH"], "car": ["K AA R"], "hours": ["AW ER Z", "AW R Z"]}
LEX = Pronouncer({w: tuple(tuple(p.split()) for p in prons) for w, prons in WORDS.items()})


def _reference(log_probs: np.ndarray, labels: list[int]) -> float:
    """The definition, slowly: over every stretch of frames [s, e], the best CTC alignment of
    ``labels`` (a boundary between words optional) costed against each frame's best phone."""
    rel = log_probs - log_probs.max(axis=1, keepdims=True)
    optional = [lab == WORD_BOUNDARY for lab in labels]
    best = -math.inf
    t_all = rel.shape[0]
    for keep in itertools.product(*[(True, False) if o else (True,) for o in optional]):
        seq = [lab for lab, k in zip(labels, keep) if k]
        ext = [PHONE_BLANK]
        for lab in seq:
            ext += [lab, PHONE_BLANK]
        n = len(ext)
        for s in range(t_all):
            d = np.full(n, -math.inf)
            d[0], d[1] = rel[s, ext[0]], rel[s, ext[1]]
            best = max(best, d[n - 1], d[n - 2])
            for t in range(s + 1, t_all):
                new = np.full(n, -math.inf)
                for j in range(n):
                    cands = [d[j]] + ([d[j - 1]] if j >= 1 else [])
                    if j >= 2 and ext[j] != PHONE_BLANK and ext[j] != ext[j - 2]:
                        cands.append(d[j - 2])
                    new[j] = max(cands) + rel[t, ext[j]]
                d = new
                best = max(best, d[n - 1], d[n - 2])
    return best


def test_the_fast_search_equals_the_definition_on_random_posteriors():
    rng = np.random.default_rng(3)
    spotter = KeywordSpotter(LEX, ["parking", "take a message"], SpotConfig(min_phones=1))
    for _ in range(3):
        lp = torch.log_softmax(torch.from_numpy(rng.normal(0, 3, (14, len(PHONES)))), -1).numpy()
        got = spotter.scores(lp)
        for word in ("parking", "take a message"):
            variants = [LEX.encode(word)]
            if word == "take a message":                    # "a" said AH or EY
                ids = LEX.encode("take a message")
                ey = list(ids)
                ey[ids.index(PHONES.index("AH"))] = PHONES.index("EY")
                variants.append(ey)
            want = max(_reference(lp, v) for v in variants)
            phones = sum(i != WORD_BOUNDARY for i in variants[0])
            assert got[word] == pytest.approx(want / phones, abs=1e-9)


def test_a_keyword_is_found_inside_a_sentence_that_says_more():
    lp = posteriors(say("IH Z | DH EH R | P AA R K IH NG"))
    scores = KeywordSpotter(LEX, ["parking", "insurance"]).scores(lp)
    assert scores["parking"] > -0.05                       # the greedy reading of its frames
    assert scores["insurance"] < -3.0
    hits = KeywordSpotter(LEX, ["parking", "insurance"]).spot(lp)
    assert [w for w, _ in hits] == ["parking"]


def test_a_phrase_is_found_with_or_without_the_word_boundary_between_its_words():
    with_boundary = posteriors(say("T EY K | AH | M EH S AH JH"))
    run_together = posteriors(say("T EY K AH M EH S AH JH"))
    for lp in (with_boundary, run_together):
        assert KeywordSpotter(LEX, ["take a message"]).scores(lp)["take a message"] > -0.05


def test_a_blurred_keyword_scores_by_how_far_its_phones_are_from_the_best():
    # each phone of "parking" is the second likeliest in its frame: about ln(0.6/0.35) a phone
    blurred = ["_"]
    for p, other in zip("P AA R K IH NG".split(), "B AO L G IY N".split()):
        blurred += [{other: 0.6, p: 0.35}, "_"]
    score = KeywordSpotter(LEX, ["parking"]).scores(posteriors(blurred))["parking"]
    assert -math.log(0.6 / 0.35) - 0.05 < score < -math.log(0.6 / 0.35) + 0.05
    assert KeywordSpotter(LEX, ["parking"], SpotConfig(threshold=-0.3)).spot(posteriors(blurred)) == ()


def test_short_and_unknown_keywords_are_left_out_and_named():
    spotter = KeywordSpotter(LEX, ["car", "parking", "zebra", "Parking!", ""])
    assert spotter.keywords == ["parking"]
    assert spotter.skipped == ["car", "zebra"]
    assert set(spotter.scores(posteriors(say("K AA R")))) == {"parking"}   # only what it spots
    with pytest.raises(ConfigError, match="phone log-probs"):
        spotter.scores(np.zeros((5, 3)))
    with pytest.raises(ConfigError, match="at most 0"):
        SpotConfig(threshold=0.5)
    assert KeywordSpotter(LEX, []).spot(posteriors(say("P AA R K IH NG"))) == ()


def test_the_joint_decoder_reports_hinted_keywords_and_leaves_the_transcript_alone():
    lm = build_lm(["is there parking"] * 5 + ["take a message"], general_words={w: 1.0 for w in WORDS})
    search = JointSearch(lm, LEX, BeamConfig(), JointConfig(lm_weight=2.0))
    rows = both(["_"], say("IH Z | DH EH R | P AA R K IH NG"))
    plain = search.stream()
    hinted = search.stream(Hints(keywords=("Parking", "insurance", "car")))
    for i in range(0, len(rows), 3):
        plain.push(rows[i:i + 3])
        hinted.push(rows[i:i + 3])
    a, b = plain.result(), hinted.result()
    assert a.spotted == () and a.text == b.text == "is there parking"
    assert [w for w, _ in b.spotted] == ["parking"] and -0.05 < b.spotted[0][1] <= 0.0
    assert search.spotter(("parking", "insurance", "car")) is search.spotter(("parking", "insurance", "car"))
