"""The agent spec's types: what a parsed spec holds (``agent.spec`` reads the YAML into them).

Every type is a frozen dataclass; options are ``Literal``s, and the parser takes each option's
allowed values from its ``Literal`` (``typing.get_args``), so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pipeline.frames import HoldAudio, TransferMode
from pipeline.options import RecordingFormat
from pipeline.voicemail import OnMachine, OnUnknown

__all__ = [
    "AgentSpec", "Backend", "DtmfAction", "DtmfOption", "HandoffKind", "HandoffSpec", "HoldAudio", "TransferMode",
    "HttpMethod", "KnowledgeItem", "LLMSpec", "LimitsSpec", "MessagesSpec", "RecordingSpec", "SlotKind", "SlotSpec",
    "TaskSpec", "ToolKind", "ToolSpec", "VoicemailSpec",
]

SlotKind = Literal["name", "phone", "text", "number", "date", "yes_no"]
ToolKind = Literal["webhook", "end_call", "transfer", "dtmf"]
HandoffKind = Literal["dial", "enqueue", "sip"]
DtmfAction = Literal["say", "transfer", "tool", "end_call"]
Backend = Literal["embedded", "openai", "bedrock"]
HttpMethod = Literal["POST", "GET"]


@dataclass(frozen=True)
class KnowledgeItem:
    question: str
    answer: str
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlotSpec:
    name: str
    prompt: str
    kind: SlotKind = "text"
    confirm: bool = True
    confirm_prompt: str | None = None   # a template: {value} and {spoken} (digits read one by one)
    sensitive: bool = False             # masked in records, webhooks and logs (pipeline.redaction)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    kind: ToolKind = "webhook"
    url: str | None = None
    method: HttpMethod = "POST"
    input_schema: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    timeout_s: float = 3.0
    retries: int = 1
    say_result: str | None = None   # a template filled from the JSON reply and the slots


@dataclass(frozen=True)
class HandoffSpec:
    """A person or queue to hand the caller to. ``mode: warm`` (``dial`` and ``sip`` only): the
    agent calls the person first while the caller hears ``hold_audio``, tells them who is calling
    and why, then joins the two; nobody answering in ``timeout_s`` brings the caller back to the
    agent, who offers to take a message."""

    name: str
    kind: HandoffKind
    target: str
    mode: TransferMode = "blind"
    timeout_s: float = 20.0
    hold_audio: HoldAudio = "music"


@dataclass(frozen=True)
class LimitsSpec:
    max_call_s: float = 600.0
    silence_prompt_s: float = 8.0
    max_silence_prompts: int = 2


@dataclass(frozen=True)
class LLMSpec:
    backend: Backend = "embedded"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    region: str | None = None
    temperature: float = 0.3
    timeout_s: float = 8.0
    filler_after_s: float = 1.2
    max_tokens: int = 300


@dataclass(frozen=True)
class DtmfOption:
    key: str
    action: DtmfAction
    value: str = ""


@dataclass(frozen=True)
class TaskSpec:
    """Something the caller can ask for: collect ``slots`` in order, call ``tool``, say ``done``."""

    name: str
    triggers: tuple[str, ...]
    slots: tuple[str, ...] = ()
    tool: str | None = None
    done: str = ""   # a template filled from the slots (and the tool's reply)
    intro: str = ""  # said before the first slot's prompt ("Sure, I can take a message.")


@dataclass(frozen=True)
class MessagesSpec:
    not_understood: str = "Sorry, I didn't catch that. Could you say it another way?"
    repeat_prompt: str = "Sorry, could you repeat that?"
    silence_prompt: str = "Are you still there?"
    goodbye: str = "Thank you for calling. Goodbye!"
    transfer: str = "Please hold while I transfer you to a person."
    fallback: str = "Sorry, something went wrong on my side."
    filler: str = "One moment please."
    anything_else: str = "Is there anything else I can help you with?"
    yes_or_no: str = "Sorry, was that a yes or a no?"
    offer_transfer: str = "Would you like me to put you through to a person?"
    no_handoff: str = "Sorry, nobody is available to take your call right now."
    cannot_answer: str = "Sorry, I don't have the answer to that."
    cannot_do: str = "Sorry, I can't help with that here."   # a request no task or answer covers
    offer_message: str = "Would you like to leave a message?"   # when a task takes messages


@dataclass(frozen=True)
class RecordingSpec:
    """``recording:``: record every call in two channels (telephony.core.recorder)."""

    enabled: bool = False
    announce: str | None = None          # said before the greeting, e.g. "This call is recorded."
    retention_days: int | None = None    # recordings older than this are deleted (at start); None: kept
    format: RecordingFormat = "opus"     # Ogg/Opus, or "wav" (16-bit PCM, eight times the size)
    s3: str | None = None                # s3://BUCKET/PREFIX: each closed recording uploaded there
    kms_key: str | None = None           # with s3: SSE-KMS with this key (else SSE-S3, AES256)
    keep_local: bool = False             # with s3: keep the file on disk after its verified upload


@dataclass(frozen=True)
class VoicemailSpec:
    """``voicemail:``: what a call the agent places does when a machine or nobody answers
    (``pipeline.voicemail``; ``agent.voicemail`` makes the plan of each call)."""

    message: str | None = None           # a template of the call's parameters: "Hi {name}, ..."
    on_machine: OnMachine = "leave_message"
    on_unknown: OnUnknown = "greet"
    max_wait_s: float = 20.0             # the longest wait for a machine's beep or greeting end


@dataclass(frozen=True)
class AgentSpec:
    name: str
    persona: str
    greeting: str
    language: str = "en-US"
    knowledge: tuple[KnowledgeItem, ...] = ()
    slots: tuple[SlotSpec, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    handoffs: tuple[HandoffSpec, ...] = ()
    limits: LimitsSpec = LimitsSpec()
    llm: LLMSpec = LLMSpec()
    dtmf_menu: tuple[DtmfOption, ...] = ()
    messages: MessagesSpec = MessagesSpec()
    tasks: tuple[TaskSpec, ...] = ()
    voice: str | None = None    # a shipped SSM voice (pipeline.voices.VOICES); None: the server's
    recording: RecordingSpec = RecordingSpec()
    voicemail: VoicemailSpec | None = None    # None: calls placed are not screened

    def slot(self, name: str) -> SlotSpec:
        return next(s for s in self.slots if s.name == name)

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def handoff(self, name: str | None = None) -> HandoffSpec | None:
        """The hand-off called ``name``, or the first one when ``name`` is None."""
        if name is None:
            return self.handoffs[0] if self.handoffs else None
        return next((h for h in self.handoffs if h.name == name), None)


# --- loading -------------------------------------------------------------------------------
