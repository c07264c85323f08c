"""Keep only what the caller heard in the conversation.

pipecat's assistant aggregator writes the agent's words into the ``LLMContext`` as they pass the
output transport, which runs ahead of what the caller's ear has received. The transport knows
better (Twilio marks, RTP sent): it pushes :class:`AgentSpeechHeardFrame` upstream. This
processor, placed just before the LLM, applies those facts to the context lazily, when the next
inference is requested; by then both the aggregator's write and the heard report have arrived,
so their order does not matter.
"""

from __future__ import annotations

import logging

from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from pipeline.frames import AgentSpeechHeardFrame

log = logging.getLogger(__name__)


def _content_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _norm(text: str) -> list[str]:
    return "".join(c.lower() if c.isalnum() or c.isspace() else " " for c in text).split()


class HeardContextProcessor(FrameProcessor):
    """Rewrites interrupted assistant messages to the words actually heard."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._pending: list[AgentSpeechHeardFrame] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, AgentSpeechHeardFrame):
            if not frame.complete:
                self._pending.append(frame)
            await self.push_frame(frame, direction)
            return
        if isinstance(frame, LLMContextFrame) and self._pending:
            messages = list(frame.context.get_messages())
            self.apply(messages)
            frame.context.set_messages(messages)
        await self.push_frame(frame, direction)

    def apply(self, messages: list) -> None:
        """Apply pending heard reports to ``messages``, edited in place."""
        for report in self._pending:
            sent = _norm(report.text_sent)
            for msg in reversed(messages):
                if not isinstance(msg, dict) or msg.get("role") != "assistant":
                    continue
                said = _norm(_content_text(msg))
                # the aggregator may hold the whole utterance or the part that passed the transport
                if said and sent[: len(said)] == said or said == sent:
                    log.info("utterance %d interrupted: keeping %d of %d words",
                             report.utterance, len(_norm(report.text_heard)), len(sent))
                    if report.text_heard:
                        msg["content"] = report.text_heard
                    else:
                        messages.remove(msg)
                    break
        self._pending.clear()
