"""`parley chat --voice`: each reply spoken with a shipped voice on the machine's speaker, or kept
as WAV files; without a speaker, one line says why and the chat goes on in text. The players here
are real processes: a script on PATH standing in for paplay that keeps what it was sent, one that
fails as paplay does without a sound server, and none at all."""

from __future__ import annotations

import io
import os
import wave
from pathlib import Path

import numpy as np
import pytest

from agent.chat_cli import chat
from pipeline.audio.speaker import Speaker, SpeakerUnavailable

EXAMPLES = Path(__file__).resolve().parents[2] / "agent" / "examples"
PRICE = "A standard cleaning and check up costs ninety five dollars"


def _player(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _args(voice: str | None, voice_out: str | None = None):
    return type("Args", (), {"agent": str(EXAMPLES / "receptionist.yaml"), "tool": [], "voice": voice,
                             "voice_out": voice_out})()


def _wav(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16), w.getframerate()


async def test_each_reply_is_played_on_the_speaker_in_the_voice_calls_use(tmp_path, monkeypatch):
    kept = tmp_path / "played"
    kept.mkdir()
    # a player that plays nothing but keeps each WAV it is sent, as paplay would take it
    _player(tmp_path, "paplay", f'n=$(ls {kept} | wc -l); cat > {kept}/$n.wav\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("PARLEY_PLAYER", raising=False)
    out = io.StringIO()
    assert await chat(_args("joe"), io.StringIO("how much is a cleaning\n"), out) == 0
    text = out.getvalue()
    assert f"agent> {PRICE}" in text and "no speaker" not in text
    played = sorted(kept.iterdir(), key=lambda p: int(p.stem))
    assert len(played) == 3                               # the probe's silence, the greeting, the answer
    probe, greeting, answer = (_wav(p.read_bytes()) for p in played)
    assert not probe[0].any()
    for pcm, rate in (greeting, answer):
        assert rate == 16000 and np.abs(pcm).max() > 3000
    assert len(answer[0]) / 16000 > 2.5                   # the whole sentence, not a chunk of it


async def test_without_a_speaker_one_line_says_why_and_the_replies_are_kept_as_files(tmp_path, monkeypatch):
    _player(tmp_path, "failing-player", 'echo "pa_context_connect() failed: Connection refused" >&2\nexit 1\n')
    monkeypatch.setenv("PARLEY_PLAYER", f"{tmp_path}/failing-player --volume 1")
    out = io.StringIO()
    folder = tmp_path / "replies"
    assert await chat(_args("slt", str(folder)), io.StringIO("how much is a cleaning\n"), out) == 0
    text = out.getvalue()
    assert text.count("[no speaker: failing-player failed (exit 1): pa_context_connect() failed: "
                      "Connection refused; the replies stay text]") == 1
    assert f"agent> {PRICE}" in text                      # the chat went on in text
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == ["001-agent.wav", "002-agent.wav"]
    pcm, rate = _wav(files[1].read_bytes())
    assert rate == 16000 and len(pcm) / rate > 2.5 and np.abs(pcm).max() > 3000


def test_no_player_installed_is_one_clear_reason(tmp_path):
    with pytest.raises(SpeakerUnavailable, match="no audio player is installed"):
        Speaker.find({"PATH": str(tmp_path)})
    with pytest.raises(SpeakerUnavailable, match="PARLEY_PLAYER names 'mpv', which is not installed"):
        Speaker.find({"PATH": str(tmp_path), "PARLEY_PLAYER": "mpv -"})


async def test_an_unknown_voice_is_one_line(tmp_path):
    from agent.errors import AgentError

    with pytest.raises(AgentError, match="--voice nobody: unknown voice 'nobody'"):
        await chat(_args("nobody"), io.StringIO(""), io.StringIO())
