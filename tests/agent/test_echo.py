"""The minimal embedded agent's replies."""

from agent.echo import EchoAgentConfig, last_user_text, reply_for


def test_echoes_what_it_heard():
    assert reply_for("what time is it", EchoAgentConfig()) == ("You said: what time is it.", False)


def test_goodbye_ends_the_call_politely():
    cfg = EchoAgentConfig()
    for text in ("okay goodbye", "Good bye then", "bye"):
        reply, ends = reply_for(text, cfg)
        assert ends and reply == cfg.farewell
    assert reply_for("maybe by tomorrow", cfg)[1] is False


def test_nothing_heard_asks_again():
    cfg = EchoAgentConfig()
    assert reply_for("", cfg) == (cfg.not_heard, False)


def test_last_user_text_reads_the_latest_user_message():
    messages = [
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "You said: first."},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    assert last_user_text(messages) == "second"
    assert last_user_text([]) == ""
