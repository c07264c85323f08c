"""The phone head: pronouncing dictionary, phone targets, the phone-lexicon beam search."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssm_engine.stt.beam import BeamConfig
from ssm_engine.stt.decode import greedy_decode
from ssm_engine.stt.errors import TranscriptError
from ssm_engine.stt.lm import build_lm
from ssm_engine.stt.model import STTConfig, STTModel
from ssm_engine.errors import ConfigError
from ssm_engine.stt.phone_beam import PhoneBeamSearch
from ssm_engine.stt.phones import PHONE_BLANK, PHONES, WORD_BOUNDARY, Pronouncer, phones_to_text

DICT = """\
;;; a comment
to T UW
two T UW
too T UW
dollars D AA1 L ER0 Z
pay P EY1
my M AY1
bill B IH1 L
pill P IH1 L
read R IY1 D
read(2) R EH1 D
i AY1
want W AA1 N T
it IH T
"""


@pytest.fixture()
def lex(tmp_path) -> Pronouncer:
    path = tmp_path / "dict"
    path.write_text(DICT)
    return Pronouncer.load(path)


def test_dictionary_reads_alternatives_drops_stress_and_encodes_with_boundaries(lex):
    assert lex.prons("read") == (("R", "IY", "D"), ("R", "EH", "D"))
    assert lex.prons("dollars") == (("D", "AA", "L", "ER", "Z"),)
    ids = lex.encode("pay my bill")
    assert phones_to_text(ids) == "P EY | M AY | B IH L"
    assert ids.count(WORD_BOUNDARY) == 2 and PHONE_BLANK not in ids
    assert lex.encode("pay my zorkbill") is None          # a word it lacks: no phone target
    assert "two" in lex and "zork" not in lex and len(lex) == 12


def test_bad_dictionary_lines_are_named(tmp_path):
    bad = tmp_path / "bad.dict"
    bad.write_text("hello HH AH L OW\nworld W ER L D XX\n")
    with pytest.raises(TranscriptError, match="bad.dict:2"):
        Pronouncer.load(bad)
    empty = tmp_path / "empty.dict"
    empty.write_text(";;; nothing\n")
    with pytest.raises(TranscriptError, match="no pronunciations"):
        Pronouncer.load(empty)


def test_model_with_a_phone_head_gives_both_outputs_and_the_config_is_checked():
    cfg = STTConfig(conv_channels=32, phone_vocab_size=len(PHONES),
                    ssm=dict(d_model=32, n_layers=1, d_state=8, headdim=16, expand=2))
    model = STTModel(cfg).eval()
    chars, phones = model.forward_heads(torch.zeros(2, 160 * 5))
    assert chars.shape == (2, 5, cfg.vocab_size) and phones.shape == (2, 5, len(PHONES))
    assert torch.equal(model(torch.zeros(2, 160 * 5)), chars)
    plain = STTModel(STTConfig(conv_channels=32, ssm=cfg.ssm)).eval()
    assert plain.forward_heads(torch.zeros(1, 160))[1] is None
    with pytest.raises(ConfigError, match="phone_vocab_size"):
        STTConfig(phone_vocab_size=7)


def posteriors(frames: list[str | dict[str, float]], floor: float = 1e-6) -> torch.Tensor:
    """Phone CTC log-probs: "AY" -> that phone at 0.98, "_" blank, "|" boundary, a dict mixes."""
    rows = []
    for item in frames:
        probs = np.full(len(PHONES), floor)
        dist = {item: 0.98} if isinstance(item, str) else item
        for ph, p in dist.items():
            probs[PHONES.index(ph)] = p
        if item != "_":
            probs[PHONE_BLANK] = max(probs[PHONE_BLANK], 1.0 - sum(dist.values()))
        rows.append(np.log(probs / probs.sum()))
    return torch.tensor(np.array(rows), dtype=torch.float32)


def say(phones: str) -> list[str | dict[str, float]]:
    out: list[str | dict[str, float]] = ["_"]
    for p in phones.split():
        out += [p, "_"]
    return out + ["_"]


@pytest.fixture()
def search(lex) -> PhoneBeamSearch:
    lm = build_lm(["i want to pay my bill", "pay two dollars", "i want two dollars",
                   "pay it too"], general_words={"pill": 1.0, "read": 1.0})
    return PhoneBeamSearch(lm, lex, BeamConfig())


def test_phones_become_words_and_the_lm_picks_the_homophone(search):
    lp = posteriors(say("AY | W AA N T | T UW | P EY | M AY | B IH L"))
    assert search.decode(lp) == "i want to pay my bill"
    lp = posteriors(say("P EY | T UW | D AA L ER Z"))
    assert search.decode(lp) == "pay two dollars"
    # an acoustic tie between b and p: the LM knows "pay my bill"
    tie = say("P EY | M AY |")[:-1] + [{"P": 0.5, "B": 0.45}, "_"] + say("IH L")[1:]
    assert search.decode(posteriors(tie)) == "pay my bill"


def test_phone_search_streams_in_pieces_like_the_whole_clip(search):
    lp = posteriors(["_"] * 10 + say("P EY | M AY | B IH L") + ["_"] * 10)
    dec = search.stream()
    for i in range(0, len(lp), 4):
        dec.push(lp[i:i + 4])
    assert dec.finalize() == search.decode(lp) == "pay my bill"
    assert search.decode(posteriors(["_"] * 5)) == ""


def test_phone_search_needs_words_it_can_pronounce(lex):
    lm = build_lm(["zork blorp"])
    with pytest.raises(ValueError, match="pronunciation"):
        PhoneBeamSearch(lm, Pronouncer({"hello": (("HH", "AH", "L", "OW"),)}), BeamConfig())


def test_phone_head_streams_like_the_whole_clip_and_a_stream_decodes_each_head():
    from ssm_engine import BatchRunner
    from ssm_engine.stt.stream import RecognizerStream

    from .test_stt_model import speechy, tiny_model

    model = tiny_model(seed=2, phone_vocab_size=len(PHONES))
    with torch.no_grad():                 # make the untrained phone head emit varied phones
        model.phone_head.bias.normal_(0, 0.5)
        model.phone_head.weight.mul_(40)
    audio = speechy(50, seed=4)
    with torch.no_grad():
        chars, phones = model.forward_heads(audio)
    full = torch.cat([torch.log_softmax(chars, -1), torch.log_softmax(phones, -1)], -1)[0]
    assert model.out_size == len(PHONES) + model.config.vocab_size
    state, rows = model.init_state(1), []
    for t in range(25):                                  # stepping, then a prefill
        y, state = model.step(audio[:, t * 160:(t + 1) * 160], state)
        rows.append(y)
    y, state = model.prefill(audio[:, 25 * 160:].reshape(1, 25, 160), state)
    stepped = torch.cat([torch.cat(rows), y[0]])
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)

    lm = build_lm(["i want to pay my bill", "pay two dollars"])
    lex = Pronouncer({"i": (("AY",),), "want": (("W", "AA", "N", "T"),), "to": (("T", "UW"),),
                      "two": (("T", "UW"),), "pay": (("P", "EY"),), "my": (("M", "AY"),),
                      "bill": (("B", "IH", "L"),), "dollars": (("D", "AA", "L", "ER", "Z"),)})
    search = PhoneBeamSearch(lm, lex, BeamConfig(char_min_prob=0.02))
    pcm = (audio[0].numpy() * 32767).astype(np.int16)
    with BatchRunner(model) as runner:
        rs = RecognizerStream(runner, model.config, flush_s=0.1, beam=search)
        taken = []
        for i in range(0, pcm.size, 480):
            fut = rs.push(pcm[i:i + 480])
            if fut is not None:
                taken.append(fut.result())
                rs.take(taken[-1])
        taken.append(rs.finish().result())
        rs.take(taken[-1])
    out = torch.cat(taken)
    v = model.config.vocab_size
    assert out.shape[1] == model.out_size
    assert rs.decoder.text == greedy_decode(out[:, :v])          # partials read the characters
    assert rs.final_text == search.decode(out[:, v:])            # the final reads the phones
    assert rs.final_text and rs.decoder.text                     # both heads said something
    plain = tiny_model()
    with BatchRunner(plain) as runner, pytest.raises(ConfigError, match="phone head"):
        RecognizerStream(runner, plain.config, beam=search)


def both(char_spec, phone_spec) -> torch.Tensor:
    """A (T, V + P) row block from character and phone posteriors, the shorter padded with
    blank frames."""
    from .test_stt_beam import posteriors as char_posteriors

    n = max(len(char_spec), len(phone_spec))
    chars = char_posteriors(list(char_spec) + ["_"] * (n - len(char_spec)))
    phones = posteriors(list(phone_spec) + ["_"] * (n - len(phone_spec)))
    return torch.cat([chars, phones], dim=1)


def test_joint_search_takes_each_head_where_it_is_sure(lex):
    from ssm_engine.stt.joint import JointConfig, JointSearch

    from .test_stt_beam import spell

    lm = build_lm(["i want to pay my bill", "pay two dollars", "my name is anna"],
                  general_words={"pill": 1.0})
    words = Pronouncer({**{w: lex.prons(w) for w in lex.words},
                        "name": (("N", "EY", "M"),), "is": (("IH", "Z"),),
                        "anna": (("AE", "N", "AH"),)})
    acoustic = BeamConfig(lm_weight=0.0, word_bonus=0.0)        # the heads alone decide
    search = JointSearch(lm, words, acoustic,
                         JointConfig(char_weight=0.5, lm_weight=0.0, word_bonus=0.0,
                                     unpronounced_penalty=5.0))
    # the characters lean to "pill" (p 0.6, b 0.35); the phone head clearly heard B: bill
    rows = both(spell("pay my ")[:-1] + [{"p": 0.6, "b": 0.35}, "_"] + spell("ill")[1:],
                say("P EY | M AY | B IH L"))
    assert search.chars.decode(rows[:, :29]) == "pay my pill"
    assert search.decode(rows) == "pay my bill"
    # a name the lexicon cannot pronounce: only the characters spell it, and it comes through
    rows = both(spell("my name is zork"), say("M AY | N EY M | IH Z | Z AO R K"))
    assert search.decode(rows) == "my name is zork"
    dec = search.stream()
    for i in range(0, len(rows), 5):
        dec.push(rows[i:i + 5])
    assert dec.finalize() == "my name is zork" and dec.frames == len(rows)
    best = dec.nbest(3)
    assert best[0][0] == "my name is zork" and all(a[1] >= b[1] for a, b in zip(best, best[1:]))
    # ... unless spelling a word the lexicon lacks costs more than the characters' evidence
    strict = JointSearch(lm, words, acoustic,
                         JointConfig(char_weight=0.5, lm_weight=0.0, word_bonus=0.0,
                                     unpronounced_penalty=40.0))
    assert strict.decode(rows) == "my name is"
    with pytest.raises(ValueError, match="rows"):
        search.stream().push(rows[:, :29])
    with pytest.raises(ValueError):
        JointConfig(char_weight=0.0, phone_weight=0.0)
    with pytest.raises(ValueError, match="char_beam_size"):
        JointConfig(char_beam_size=0)
    # the character search only proposes: its beam is JointConfig's, never wider than the phones'
    assert (search.chars.config.beam_size, search.phones.config.beam_size) == (64, 64)
    cheap = JointSearch(lm, words, BeamConfig(), JointConfig(char_beam_size=16))
    assert (cheap.chars.config.beam_size, cheap.phones.config.beam_size) == (16, 64)
    narrow = JointSearch(lm, words, BeamConfig(beam_size=8), JointConfig(char_beam_size=16))
    assert (narrow.chars.config.beam_size, narrow.phones.config.beam_size) == (8, 8)
    assert search.decode(torch.zeros(0, 29 + len(PHONES))) == ""
    # silence: every frame sure of the blank (none left to rescore once skipped) -> nothing
    assert search.decode(both(["_"] * 30, ["_"] * 30)) == ""
