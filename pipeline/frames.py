"""parley's own pipecat frames (the few that pipecat has no word for)."""

from __future__ import annotations

from dataclasses import dataclass

from pipecat.frames.frames import SystemFrame


@dataclass
class AgentSpeechHeardFrame(SystemFrame):
    """Upstream, from the transport: how much of an agent utterance the caller really heard.

    ``complete`` is True when the whole utterance played; after a barge-in it is False and
    ``text_heard`` holds only the words played before the caller cut in.
    """

    utterance: int
    text_sent: str
    text_heard: str
    complete: bool
