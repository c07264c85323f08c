"""The agents one server runs: the one it started with, and those ``POST /calls`` names.

    catalog = AgentCatalog(default_factory, build=lambda path: factory_of_the_spec_at(path))
    server = CallServer(config, agent_factory=catalog, agents=catalog.load)
    key = await catalog.load("order_status")   # agent/examples/order_status.yaml, loaded once
    # a call whose params carry parley_agent=key gets that agent; every other call the default

``load`` takes ``echo``, the name of a spec in ``agent/examples`` or the path of a spec file; it
loads and checks it (its LLM back end too, as ``parley serve`` does at start) off the event loop,
once. A call picks an agent only among those already loaded: a parameter that names another
(an inbound SIP header, say) gets the default agent, so no caller can make the server read a file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from pipecat.processors.frame_processor import FrameProcessor

from agent.errors import AgentError
from pipeline.errors import PipelineError
from telephony.calls import AgentFactory, CallInfo
from telephony.calls_api import AGENT_PARAM

__all__ = ["AgentCatalog"]

EXAMPLES = Path(__file__).resolve().parent.parent / "agent" / "examples"


class AgentCatalog:
    """``build`` makes the factory of the spec at a path ("echo": the echo agent); it may block."""

    def __init__(self, default: AgentFactory, *, build: Callable[[Path], AgentFactory]):
        self.default = default
        self._build = build
        self._loaded: dict[str, AgentFactory] = {}
        self._lock = asyncio.Lock()

    def __call__(self, info: CallInfo) -> FrameProcessor:
        return self._loaded.get(info.params.get(AGENT_PARAM, ""), self.default)(info)

    async def load(self, name: str) -> str:
        """Load the agent ``name`` names (once); the key calls carry. ValueError: no such agent."""
        async with self._lock:
            if name in self._loaded:
                return name
            path = Path(name)
            if name != "echo" and not path.suffix and "/" not in name:
                path = EXAMPLES / f"{name}.yaml"
            if name != "echo" and (path.suffix not in (".yaml", ".yml") or not path.is_file()):
                raise ValueError(f"no agent spec at {path} (give echo, an example's name or a .yaml path)")
            try:
                factory = await asyncio.to_thread(self._build, path)
            except (AgentError, PipelineError, OSError) as exc:
                raise ValueError(str(exc)) from exc
            self._loaded[name] = factory
            return name
