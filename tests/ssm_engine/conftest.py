"""ssm_engine tests run torch on one thread (as the engine is meant to run); see ssm_helpers.py."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
