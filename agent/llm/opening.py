"""The first processor of an LLM agent: greets the caller and hands the LLM its tools.

pipecat LLM services read the functions they may call from the ``LLMContext`` of each request,
and the context belongs to the pipeline (``build_pipeline`` makes it). This processor sets the
agent's tools on a context that has none when the first request passes, and speaks the greeting
when the call starts (a ``TTSSpeakFrame``: the assistant aggregator writes it into the context,
so the LLM knows what it already said). At the end of the call it closes the toolbox's HTTP
session, if the toolbox opened one.
"""

from __future__ import annotations

from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import Frame, LLMContextFrame, StartFrame, TTSSpeakFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.types import is_given

from agent.tools import ToolBox


class OpeningProcessor(FrameProcessor):
    """Greets on start; advertises ``tools`` on every context that advertises none."""

    def __init__(self, *, greeting: str, tools: ToolsSchema | None,
                 toolbox: ToolBox | None = None, **kwargs):
        super().__init__(**kwargs)
        self._greeting = greeting
        self._tools = tools
        self._toolbox = toolbox

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame) and self._tools is not None:
            tools = frame.context.tools
            if tools is None or not is_given(tools):
                frame.context.set_tools(self._tools)
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame) and self._greeting:
            await self.push_frame(TTSSpeakFrame(self._greeting))

    async def cleanup(self):
        if self._toolbox is not None:
            await self._toolbox.aclose()
        await super().cleanup()
