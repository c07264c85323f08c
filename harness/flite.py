"""Text to telephone speech with Debian's ``flite`` (a natural voice, unlike espeak-ng's).

``flite -voice slt -t TEXT -o out.wav`` writes 16 kHz 16-bit mono; ``to_ulaw_frames`` turns any
int16 PCM into what a phone line carries: silence trimmed off the ends, 8 kHz, mu-law, padded
with mu-law silence to whole 20 ms frames. ``flite`` runs as a subprocess, off the event loop.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import numpy as np

from pipeline.audio.g711 import ULAW_SILENCE, resample, ulaw_encode
from pipeline.audio.wav import read_wav, trim_silence
from pipeline.errors import AudioFormatError, EngineUnavailableError

__all__ = ["synthesize_flite", "to_ulaw_frames"]


async def synthesize_flite(
    text: str, voice: str = "slt", timeout_s: float = 20.0
) -> tuple[np.ndarray, int]:
    """Speak ``text``; return ``(int16 PCM, sample_rate_hz)``. Raises ``EngineUnavailableError``
    when flite is missing, fails, or takes longer than ``timeout_s``."""
    with tempfile.TemporaryDirectory(prefix="parley-flite-") as tmp:
        out = Path(tmp) / "say.wav"
        try:
            proc = await asyncio.create_subprocess_exec(
                "flite", "-voice", voice, "-t", text, "-o", str(out),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            msg = f"cannot run flite (apt-get install flite): {exc}"
            raise EngineUnavailableError(msg) from exc
        try:
            async with asyncio.timeout(timeout_s):
                _, stderr = await proc.communicate()
        except TimeoutError as exc:
            raise EngineUnavailableError(f"flite took longer than {timeout_s:.0f} s") from exc
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if proc.returncode != 0 or not out.exists():
            detail = stderr.decode(errors="replace").strip()[:200]
            raise EngineUnavailableError(f"flite failed (voice {voice!r}): {detail}")
        try:
            return await asyncio.to_thread(read_wav, out)
        except (AudioFormatError, OSError) as exc:
            raise EngineUnavailableError(f"flite wrote an unreadable WAV: {exc}") from exc


def to_ulaw_frames(pcm_int16: np.ndarray, sample_rate_hz: int, frame_bytes: int = 160) -> bytes:
    """Trim, resample to 8 kHz, mu-law encode and pad to whole frames. Empty if all silent."""
    pcm = trim_silence(pcm_int16, sample_rate_hz)
    if pcm.size == 0:
        return b""
    mulaw = ulaw_encode(resample(pcm, sample_rate_hz, 8000))
    return mulaw + bytes([ULAW_SILENCE]) * (-len(mulaw) % frame_bytes)
