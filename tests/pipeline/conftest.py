"""Shared fixtures for the pipeline tests: real speech from flite, cached per session."""

from __future__ import annotations

import shutil
import subprocess
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soxr


@pytest.fixture(scope="session")
def flite_speech(tmp_path_factory) -> Callable[[str, int], np.ndarray]:
    """``flite_speech(text, rate_hz, voice="slt")`` -> int16 mono speech at ``rate_hz``."""
    if shutil.which("flite") is None:
        pytest.skip("flite not installed (apt-get install flite)")
    folder: Path = tmp_path_factory.mktemp("flite")
    cache: dict[tuple[str, str], tuple[np.ndarray, int]] = {}

    def speech(text: str, rate_hz: int, voice: str = "slt") -> np.ndarray:
        if (voice, text) not in cache:
            path = folder / f"{len(cache)}.wav"
            subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(path)], check=True)
            with wave.open(str(path)) as w:
                pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
                cache[(voice, text)] = (pcm, w.getframerate())
        pcm, native = cache[(voice, text)]
        return pcm if native == rate_hz else soxr.resample(pcm, native, rate_hz)

    return speech
