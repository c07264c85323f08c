"""/metrics reports speech-engine worker processes: how many are up, how many were replaced."""

from __future__ import annotations

from telephony.metrics import Metrics
from tests.metrics_text import sample


def test_registered_engines_are_asked_at_every_scrape():
    state = {"up": 1, "restarts": 0}
    metrics = Metrics()
    assert "parley_engine_workers" not in metrics.render()  # nothing registered, nothing shown
    metrics.register_engine("ssm-voice", lambda: state["up"], lambda: state["restarts"])
    metrics.register_engine("pocketsphinx", lambda: 2, lambda: 0)
    text = metrics.render()
    assert "# TYPE parley_engine_workers gauge" in text
    assert "# TYPE parley_engine_restarts_total counter" in text
    assert sample(text, 'parley_engine_workers{engine="ssm-voice"}') == 1
    assert sample(text, 'parley_engine_workers{engine="pocketsphinx"}') == 2
    assert sample(text, 'parley_engine_restarts_total{engine="ssm-voice"}') == 0
    state.update(up=0, restarts=1)  # the voice died; its replacement is starting
    text = metrics.render()
    assert sample(text, 'parley_engine_workers{engine="ssm-voice"}') == 0
    assert sample(text, 'parley_engine_restarts_total{engine="ssm-voice"}') == 1
