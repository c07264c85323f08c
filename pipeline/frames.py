"""parley's own pipecat frames (the few that pipecat has no word for)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pipecat.frames.frames import SystemFrame

from ssm_engine.stt.hints import HintKind as HintKind  # re-exported for the agent
from ssm_engine.stt.hints import Hints, Recognition


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


TransferKind = Literal["dial", "enqueue", "sip"]
TransferMode = Literal["blind", "warm"]
HoldAudio = Literal["music", "tone"]
TransferOutcome = Literal["joined", "no-answer", "failed"]


@dataclass
class TransferCallFrame(SystemFrame):
    """Upstream, from the agent: hand the caller to a person. The transport carries it out.

    ``kind`` says how: ``dial`` a phone number (Twilio ``<Dial>``), ``enqueue`` into a Twilio
    Flex/TaskRouter workflow (``<Enqueue workflowSid=...>``), or ``sip`` REFER to a URI.
    ``target`` is the number, the workflow SID, or the SIP URI.

    ``mode``: ``blind`` hands the caller over and the agent is gone; ``warm`` calls the person
    first (the caller hears ``hold_audio``), says ``summary`` to them, then joins the two; nobody
    answering in ``timeout_s`` gives the caller back to the agent (``TransferOutcomeFrame``).
    """

    kind: TransferKind
    target: str
    reason: str = ""
    mode: TransferMode = "blind"
    summary: str = ""
    timeout_s: float = 20.0
    hold_audio: HoldAudio = "music"


@dataclass
class TransferOutcomeFrame(SystemFrame):
    """Downstream, from the transport: how a warm transfer ended. ``joined``: the caller and the
    person talk, the agent has left; ``no-answer`` or ``failed``: the caller is the agent's again."""

    outcome: TransferOutcome
    detail: str = ""


@dataclass
class AgentEventFrame(SystemFrame):
    """Downstream, from the agent: something the call record should keep (a tool call, a slot filled).

    ``kind`` names it (``tool_call``, ``slot``, ``transfer``, ``hangup``); ``data`` is JSON-able.
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class RecognitionHintsFrame(SystemFrame):
    """Upstream, from the agent: what to listen for in the caller's next utterances (yes/no,
    digits, the agent's key phrases), until the next such frame. The recogniser consumes it;
    one that cannot use hints (pocketsphinx) drops it."""

    hints: Hints


@dataclass
class RecognitionFrame(SystemFrame):
    """Downstream, from the recogniser, right after each final ``TranscriptionFrame``: that final
    with its confidence and the best alternative readings, for an agent that weighs what it
    heard (it reaches the agent before the turn's ``LLMContextFrame``)."""

    recognition: Recognition


@dataclass
class SpeechPauseFrame(SystemFrame):
    """The VAD's stop timer started (``paused``: a window heard no speech after speech; the stop
    follows ``stop_secs`` later unless speech comes again) or ended in speech (not ``paused``: the
    VAD heard speech again, before that stop or after it). The recogniser starts decoding the utterance so far at the pause, so that its final is
    ready when the stop comes (``pipeline.engines.ssm_recognizer``)."""

    paused: bool = True
