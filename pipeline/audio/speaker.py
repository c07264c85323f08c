"""The machine's speaker, for tools a person runs at a desk (``parley chat --voice``).

    speaker = Speaker.find()          # a player that plays here, or SpeakerUnavailable saying why
    speaker.play(pcm_int16, 16000)    # blocks until it has been played

A player is a program that plays a WAV file read from its stdin: ``$PARLEY_PLAYER`` when set (a
command line, split as a shell would), else the first installed of PulseAudio's ``paplay``,
PipeWire's ``pw-play -`` and ALSA's ``aplay -q`` that plays. Whether a sound card answers is
known only by playing, so ``find`` plays 20 ms of silence with each in turn and, when none plays,
gives their complaints as the reason there is no speaker (a server, a container, a CI runner:
none has one).
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess

import numpy as np

from pipeline.audio.wav import write_wav

__all__ = ["PLAYERS", "Speaker", "SpeakerUnavailable", "wav_bytes"]

PLAYERS: tuple[tuple[str, ...], ...] = (("paplay",), ("pw-play", "-"), ("aplay", "-q"))
PROBE_TIMEOUT_S = 5.0


class SpeakerUnavailable(Exception):
    """No speaker here; the message says why in one line."""


def wav_bytes(pcm: np.ndarray, rate_hz: int) -> bytes:
    """Mono int16 samples as a WAV file's bytes."""
    buf = io.BytesIO()
    write_wav(buf, np.asarray(pcm, np.int16), rate_hz)
    return buf.getvalue()


class Speaker:
    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.name = os.path.basename(command[0])

    @classmethod
    def find(cls, env: dict[str, str] | None = None) -> Speaker:
        """The player that plays here (module docstring), or ``SpeakerUnavailable``."""
        env = dict(os.environ if env is None else env)
        chosen = env.get("PARLEY_PLAYER", "").strip()
        if chosen:
            command = shlex.split(chosen)
            if shutil.which(command[0], path=env.get("PATH")) is None:
                raise SpeakerUnavailable(f"PARLEY_PLAYER names {command[0]!r}, which is not installed")
            found = [tuple(command)]
        else:
            found = [p for p in PLAYERS if shutil.which(p[0], path=env.get("PATH")) is not None]
            if not found:
                raise SpeakerUnavailable("no audio player is installed (paplay, pw-play or aplay; or set "
                                         "PARLEY_PLAYER to a command that plays a WAV from its stdin)")
        why = []
        for player in found:
            speaker = cls(list(player))
            try:
                speaker.play(np.zeros(160, np.int16), 8000)      # 20 ms of silence: is a device there?
            except SpeakerUnavailable as exc:
                why.append(str(exc))
                continue
            return speaker
        raise SpeakerUnavailable("; ".join(why))

    def play(self, pcm: np.ndarray, rate_hz: int) -> None:
        """Play mono int16 samples; ``SpeakerUnavailable`` with the player's own reason if it fails."""
        seconds = len(pcm) / rate_hz
        try:
            done = subprocess.run(self.command, input=wav_bytes(pcm, rate_hz), capture_output=True,
                                  timeout=PROBE_TIMEOUT_S + 2 * seconds, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SpeakerUnavailable(f"{self.name}: {exc}") from exc
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise SpeakerUnavailable(f"{self.name} failed (exit {done.returncode})"
                                     + (f": {said[-1]}" if said else ""))
