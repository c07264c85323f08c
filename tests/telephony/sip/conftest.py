"""A real SipServer on 127.0.0.1:0 and a helper that places real calls at it with sipp."""

from __future__ import annotations

import asyncio
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pipecat.frames.frames import EndWorkerFrame, Frame, InputDTMFFrame, LLMContextFrame, VADUserStartedSpeakingFrame
from pipecat.processors.frame_processor import FrameDirection

from agent.echo import EchoAgentConfig, EchoAgentProcessor, last_user_text
from pipeline.builder import PipelineConfig
from pipeline.frames import TransferCallFrame
from telephony.sip import SipConfig, SipServer

SCENARIOS = Path(__file__).parent / "scenarios"
PCAP_DIR = Path("/usr/share/sip-tester")


def free_udp_port() -> int:
    """A port for sipp to bind (an outside program binds its own port; a socket of ours is bound
    and held where the test itself listens)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProbeAgent(EchoAgentProcessor):
    """The echo agent, noting what reached it (for assertions). Quiet: no greeting.

    Keys act: ``#`` hangs up (EndWorkerFrame), ``*`` transfers to ``sip:human@example.com``.
    """

    def __init__(self, seen: "Seen", **kwargs):
        super().__init__(EchoAgentConfig(greet_on_start=False), **kwargs)
        self._seen = seen

    async def process_frame(self, frame: Frame, direction):
        if isinstance(frame, InputDTMFFrame):
            self._seen.dtmf.append(frame.button.value)
            if frame.button.value == "#":
                await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)
            elif frame.button.value == "*":
                await self.push_frame(TransferCallFrame(kind="sip", target="sip:human@example.com"),
                                      FrameDirection.UPSTREAM)
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._seen.speech_starts += 1
        elif isinstance(frame, LLMContextFrame):
            self._seen.transcripts.append(last_user_text(frame.context.get_messages()))
        await super().process_frame(frame, direction)


@dataclass
class Seen:
    dtmf: list[str] = field(default_factory=list)
    speech_starts: int = 0
    transcripts: list[str] = field(default_factory=list)
    agents: int = 0


@dataclass
class SippResult:
    returncode: int
    stdout: str
    stderr: str


async def run_sipp(server: SipServer, workdir: Path, *, scenario: str | None = None, builtin: str | None = None,
                   extra: tuple[str, ...] = (), timeout_s: float = 30.0) -> SippResult:
    """Place one call with sipp at ``server``; returns sipp's exit code (0: the scenario passed)."""
    (workdir / "pcap").mkdir(parents=True, exist_ok=True)
    for pcap in PCAP_DIR.glob("*.pcap"):
        target = workdir / "pcap" / pcap.name
        if not target.exists():
            shutil.copy(pcap, target)
    args = ["sipp", f"127.0.0.1:{server.port}", "-i", "127.0.0.1", "-p", str(free_udp_port()),
            "-mp", str(free_udp_port()), "-m", "1", "-nostdin", "-timeout", f"{int(timeout_s)}s",
            "-timeout_error", "-trace_err", "-error_file", str(workdir / "sipp_errors.log")]
    args += ["-sf", str(SCENARIOS / scenario)] if scenario else ["-sn", builtin or "uac_pcap"]
    args += list(extra)
    proc = await asyncio.create_subprocess_exec(*args, cwd=workdir, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(timeout_s + 10):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    errors = workdir / "sipp_errors.log"
    return SippResult(proc.returncode or 0, out.decode(errors="replace"),
                      err.decode(errors="replace") + (errors.read_text(errors="replace") if errors.exists() else ""))


async def wait_for(predicate, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.05)


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
async def make_sip_server(seen):
    """``await make_sip_server(pipeline=None, **SipConfig overrides)`` -> a started SipServer
    (stopped afterwards)."""
    if shutil.which("sipp") is None:
        pytest.skip("sipp not installed (apt-get install sip-tester)")
    servers: list[SipServer] = []

    def factory(_info):
        seen.agents += 1
        return ProbeAgent(seen)

    async def make(pipeline: PipelineConfig | None = None, **overrides) -> SipServer:
        config = SipConfig(**{"host": "127.0.0.1", "port": 0, "rtp_port_min": 30000, "rtp_port_max": 39999,
                              "reraise_call_errors": True, **overrides})
        server = SipServer(config, factory, pipeline_config=pipeline or PipelineConfig(vad="webrtc"))
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


@pytest.fixture
async def sip_server(make_sip_server):
    return await make_sip_server()
