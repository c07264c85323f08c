"""HeardContextProcessor keeps only the heard words of an interrupted utterance."""

from pipeline.frames import AgentSpeechHeardFrame
from pipeline.heard import HeardContextProcessor


def _report(sent, heard, complete=False):
    return AgentSpeechHeardFrame(utterance=2, text_sent=sent, text_heard=heard, complete=complete)


def test_interrupted_message_is_cut_to_the_heard_words():
    p = HeardContextProcessor()
    p._pending.append(_report("You said: the weather is nice today.", "You said: the weather"))
    messages = [
        {"role": "user", "content": "the weather is nice today"},
        {"role": "assistant", "content": "You said: the weather is nice today."},
        {"role": "user", "content": "stop"},
    ]
    p.apply(messages)
    assert messages[1]["content"] == "You said: the weather"
    assert p._pending == []


def test_aggregator_partial_text_is_matched_too():
    p = HeardContextProcessor()
    p._pending.append(_report("one two three four", "one two"))
    messages = [{"role": "assistant", "content": "one two three"}]
    p.apply(messages)
    assert messages == [{"role": "assistant", "content": "one two"}]


def test_nothing_heard_removes_the_message():
    p = HeardContextProcessor()
    p._pending.append(_report("hello there", ""))
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]
    p.apply(messages)
    assert messages == [{"role": "user", "content": "hi"}]


def test_unrelated_assistant_messages_are_left_alone():
    p = HeardContextProcessor()
    p._pending.append(_report("something else entirely", "something"))
    messages = [{"role": "assistant", "content": "hello there"}]
    p.apply(messages)
    assert messages == [{"role": "assistant", "content": "hello there"}]
