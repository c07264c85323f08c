"""The minimal embedded agent: greets, says back what it heard, ends the call on "goodbye".

It stands where an LLM service stands in a pipecat pipeline: it takes the ``LLMContextFrame``
that the user aggregator sends at the end of each caller turn and answers with
``LLMFullResponseStartFrame`` / ``LLMTextFrame``s / ``LLMFullResponseEndFrame``, so every LLM
backend plugs into the same place. No network, no keys, no model.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

log = logging.getLogger(__name__)

_GOODBYE = re.compile(r"\b(good ?bye|bye|hang up)\b", re.IGNORECASE)


@dataclass(frozen=True)
class EchoAgentConfig:
    greeting: str = "Hello, this is parley. How can I help you today?"
    farewell: str = "Thank you for calling. Goodbye!"
    not_heard: str = "Sorry, I did not catch that. Could you say it again?"
    greet_on_start: bool = True


def last_user_text(messages: list) -> str:
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return content.strip()
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict)).strip()
    return ""


def reply_for(text: str, config: EchoAgentConfig) -> tuple[str, bool]:
    """The reply to a caller turn and whether it ends the call."""
    if not text:
        return config.not_heard, False
    if _GOODBYE.search(text):
        return config.farewell, True
    return f"You said: {text}.", False


class EchoAgentProcessor(FrameProcessor):
    """Greets on start, answers each caller turn, ends the call politely on goodbye."""

    def __init__(self, config: EchoAgentConfig | None = None, **kwargs):
        super().__init__(**kwargs)
        self._config = config or EchoAgentConfig()

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            if self._config.greet_on_start:
                await self._say(self._config.greeting)
        elif isinstance(frame, LLMContextFrame):
            text = last_user_text(frame.context.get_messages())
            reply, ends = reply_for(text, self._config)
            await self._say(reply)
            if ends:
                log.info("caller said goodbye: ending the call after the farewell plays")
                await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)
        else:
            await self.push_frame(frame, direction)

    async def _say(self, text: str) -> None:
        await self.push_frame(LLMFullResponseStartFrame())
        await self.push_frame(LLMTextFrame(text))
        await self.push_frame(LLMFullResponseEndFrame())
