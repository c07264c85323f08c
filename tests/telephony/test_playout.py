"""PlayoutTracker: marks out, echoes in, heard text out."""

from telephony.playout import PlayoutTracker, UtteranceState


def _speak(tracker: PlayoutTracker, words: list[str], total_ms: float, chunk_ms: float = 20.0) -> list[str]:
    for i, w in enumerate(words):
        tracker.add_word(w, i * total_ms / len(words))
    marks = []
    sent = 0.0
    while sent < total_ms:
        marks += tracker.audio_sent(chunk_ms)
        sent += chunk_ms
    return marks


def test_progress_marks_every_200ms_and_end_mark():
    t = PlayoutTracker(mark_every_ms=200)
    marks = _speak(t, ["one", "two"], 1000)
    assert marks == ["u1:200", "u1:400", "u1:600", "u1:800", "u1:1000"]
    assert t.end() == "u1:end"
    assert t.end() is None  # nothing playing any more


def test_end_mark_echo_means_everything_heard():
    t = PlayoutTracker()
    _speak(t, ["hello", "there", "friend"], 900)
    t.end()
    utt = t.mark_echoed("u1:end")
    assert utt is not None and utt.state is UtteranceState.HEARD
    assert utt.heard_text() == "hello there friend"


def test_clear_keeps_only_words_before_last_echoed_mark():
    t = PlayoutTracker(mark_every_ms=200)
    words = ["a", "b", "c", "d", "e"]  # word i starts at i*200 ms
    _speak(t, words, 1000)
    t.mark_echoed("u1:200")
    t.mark_echoed("u1:400")
    utt = t.clear()
    assert utt is not None and utt.state is UtteranceState.CLEARED
    # marks flushed by the clear come back at once and must not count
    assert t.mark_echoed("u1:800") is None
    assert t.mark_echoed("u1:end") is None
    assert utt.heard_text() == "a b"  # words starting at 0 and 200 ms (< 400 ms heard)


def test_untimed_words_are_spread_over_the_audio():
    t = PlayoutTracker(mark_every_ms=100)
    for w in ["alpha", "bravo", "charlie", "delta"]:
        t.add_word(w, None)
    for _ in range(50):
        t.audio_sent(20)  # 1000 ms
    t.mark_echoed("u1:500")
    t.clear()
    assert t.utterances[0].heard_text() == "alpha bravo"


def test_second_utterance_is_numbered_apart():
    t = PlayoutTracker()
    _speak(t, ["hi"], 100)
    t.end()
    marks = _speak(t, ["again"], 400)
    assert marks and all(m.startswith("u2:") for m in marks)
    assert t.mark_echoed("u1:end").number == 1


def test_foreign_marks_are_ignored():
    t = PlayoutTracker()
    assert t.mark_echoed("not-ours") is None
    assert t.mark_echoed("u9:100") is None
    _speak(t, ["x"], 100)
    assert t.mark_echoed("u1:abc") is None


def test_only_marks_we_sent_count_and_each_once():
    """Regression: ``u0:end`` (never sent: index -1 is the last utterance) marked an utterance
    heard, and so did ``u1:end`` echoed before the end mark was ever sent."""
    t = PlayoutTracker(mark_every_ms=200)
    _speak(t, ["one", "two", "three"], 600)
    assert t.mark_echoed("u0:end") is None and t.mark_echoed("u1:end") is None
    assert t.utterances[0].state is UtteranceState.PLAYING
    assert t.mark_echoed("u1:200") is not None
    assert t.mark_echoed("u1:200") is None  # echoed twice: the second is nothing
    assert t.mark_echoed("x" * 10_000) is None
    assert t.end() == "u1:end" and t.mark_echoed("u1:end").state is UtteranceState.HEARD
