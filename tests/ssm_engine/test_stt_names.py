"""The name hint: callers' names in their own phone search, scored by the names' exact prior."""

from __future__ import annotations

import gzip

import pytest

from ssm_engine.stt.beam import BeamConfig
from ssm_engine.stt.errors import TranscriptError
from ssm_engine.stt.hints import Hints
from ssm_engine.stt.joint import JointConfig, JointSearch
from ssm_engine.stt.lm import build_lm
from ssm_engine.stt.names import NameTable, names_lm
from ssm_engine.stt.phones import Pronouncer

from .test_stt_hints import _decode as decode_streamed

NAME = Hints(expect=frozenset({"name"}))
WORDS = {
    "my": "M AY", "name": "N EY M", "is": "IH Z", "it's": "IH T S", "this": "DH IH S",
    "i": "AY", "want": "W AA N T", "to": "T UW", "pay": "P EY", "bill": "B IH L",
    "sara": "S EH R AH", "jones": "JH OW N Z", "yes": "Y EH S",
}


@pytest.fixture(scope="module")
def table() -> NameTable:
    return NameTable.load()


@pytest.fixture(scope="module")
def search() -> JointSearch:
    # as in the shipped LM: "sara jones" sampled, "sarah" never; no rarer name at all
    lm = build_lm(["my name is sara jones"] * 5 + ["i want to pay my bill"] * 10 + ["yes"],
                  general_words={w: 1.0 for w in WORDS})
    lex = Pronouncer({w: (tuple(p.split()),) for w, p in WORDS.items()})
    return JointSearch(lm, lex, BeamConfig(), JointConfig(lm_weight=2.0))


def _decode(search: JointSearch, phones: str, hints: Hints = NAME):
    return decode_streamed(search, phones, hints)


def _said(table: NameTable, *words: str) -> str:
    return " | ".join(" ".join(table.prons[w][0]) if w in table.prons else WORDS[w]
                      for w in words)


def test_the_name_hint_writes_the_commoner_of_two_names_said_alike(search, table):
    """Guards bench_conversations' "sara jones": the word LM had sampled that pair and never
    "sarah jones", so the slot was misspelt for a name more than twice as common."""
    assert table.first["sarah"] > 2 * table.first["sara"]
    said = _said(table, "my", "name", "is", "sarah", "jones")
    assert _decode(search, said, Hints()).text == "my name is sara jones"
    hinted = _decode(search, said)
    assert hinted.text == "my name is sarah jones" and hinted.hinted
    assert 0.0 < hinted.confidence <= 1.0


def test_the_name_hint_finds_names_the_recogniser_has_no_word_for(search, table):
    said = _said(table, "it's", "gwendolyn", "nguyen")
    free = _decode(search, said, Hints())
    assert "gwendolyn" not in free.text             # not in its lexicon: it cannot say it
    assert _decode(search, said).text == "it's gwendolyn nguyen"
    assert _decode(search, _said(table, "this", "is", "yolanda")).text == "this is yolanda"


def test_the_name_hint_does_not_take_over_another_answer(search):
    res = _decode(search, "AY | W AA N T | T UW | P EY | M AY | B IH L")
    assert res.text == "i want to pay my bill" and not res.hinted


def test_the_exact_prior_multiplies_the_carrier_and_each_name(table):
    both_names = table.logp("my name is sarah jones")
    assert both_names == table.logp("sarah jones")          # two carriers of the same weight
    assert both_names > table.logp("my name is sara jones")
    assert table.logp("brown") > table.logp("zamora")       # by how common the name is
    assert table.logp("my name is") is None
    assert table.logp("my name is qzx jones") is None       # not a name in the table
    assert table.logp("hello there") is None


def test_the_names_lm_knows_every_name_and_its_carriers(table):
    lm = names_lm(table, sentences=500)
    assert set(table.first) | set(table.last) <= set(lm.vocab)
    assert {"my", "name", "is", "it's"} <= set(lm.vocab)
    # a base lexicon without "speaking" leaves out the carrier that needs it
    base = Pronouncer({w: (tuple(p.split()),) for w, p in WORDS.items()})
    assert "speaking" not in names_lm(table, base, sentences=500).vocab
    merged = table.pronouncer(base)
    assert merged.prons("sarah") == (("S", "EH", "R", "AH"),) and merged.prons("my")


def test_a_damaged_names_table_is_named(tmp_path):
    bad = tmp_path / "names.tsv.gz"
    with gzip.open(bad, "wt") as f:
        f.write("first\tsarah\tnot-a-number\tS EH R AH\n")
    with pytest.raises(TranscriptError, match="names.tsv.gz:1"):
        NameTable.load(bad)
    (tmp_path / "plain.tsv.gz").write_text("not gzip")
    with pytest.raises(TranscriptError, match="cannot read"):
        NameTable.load(tmp_path / "plain.tsv.gz")
    with gzip.open(bad, "wt") as f:
        f.write("first\tsarah\t0.01\tS EH R AH\n")
    with pytest.raises(TranscriptError, match="no first or no last"):
        NameTable.load(bad)


def test_a_grammar_the_lexicon_cannot_build_leaves_its_hint_out(search, caplog):
    """A small model's lexicon without the digit words: the services build every grammar at
    start, and that must not stop the recogniser; the digits hint is logged as off, once."""
    with caplog.at_level("WARNING", logger="ssm_engine.stt.joint"):
        search.warm_grammars()
        search.warm_grammars()
    assert search.has_grammar("name") and not search.has_grammar("digits")
    assert sum("digits hint is off" in r.getMessage() for r in caplog.records) == 1
    said = "AY | W AA N T | T UW | P EY | M AY | B IH L"
    res = _decode(search, said, Hints(expect=frozenset({"digits"})))
    assert res.text == "i want to pay my bill" and not res.hinted
