"""flite synthesis and conversion to telephone frames."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from harness.flite import synthesize_flite, to_ulaw_frames
from pipeline.audio.g711 import ULAW_SILENCE, ulaw_decode
from pipeline.errors import EngineUnavailableError

needs_flite = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")


@needs_flite
async def test_flite_speaks_at_16_khz() -> None:
    pcm, rate_hz = await synthesize_flite("Hello there.", "slt", timeout_s=10)
    assert rate_hz == 16000 and pcm.dtype == np.int16
    assert 0.4 < pcm.size / rate_hz < 2.0
    assert np.abs(pcm).max() > 3000


async def test_missing_flite_binary_is_an_engine_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EngineUnavailableError, match="apt-get install flite"):
        await synthesize_flite("Hello.", "slt", timeout_s=10)


def test_to_ulaw_frames_trims_resamples_and_pads() -> None:
    pcm = np.zeros(16000, np.int16)
    t = np.arange(3300) / 16000
    pcm[4000:7300] = (8000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    out = to_ulaw_frames(pcm, 16000)
    assert len(out) % 160 == 0
    # 3300 loud samples + 2 x 20 ms margins at 16 kHz -> ~1970 samples at 8 kHz -> 13 frames.
    assert len(out) == 160 * 13 and out.endswith(bytes([ULAW_SILENCE]) * 100)
    assert np.abs(ulaw_decode(out)).max() > 6000
    assert to_ulaw_frames(np.zeros(800, np.int16), 8000) == b""
