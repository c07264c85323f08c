"""LogLimiter: once per key per minute, and a bounded memory of keys."""

from telephony.log_limit import LogLimiter


def test_once_per_key_per_interval_and_the_oldest_keys_forgotten():
    now = [0.0]
    once = LogLimiter(every_s=60.0, max_keys=2, clock=lambda: now[0])
    assert once("a") and not once("a") and once("b")
    now[0] = 59.9
    assert not once("a")
    now[0] = 60.0
    assert once("a")  # a minute later: again
    assert once("c")  # a third key: the oldest ("b") is forgotten
    assert once("b")
