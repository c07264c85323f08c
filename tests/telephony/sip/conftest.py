"""A real SipServer on 127.0.0.1:0, a helper that places real calls at it with sipp, and sipp as
the callee of the calls parley places (``callee``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from pipecat.frames.frames import EndWorkerFrame, Frame, InputDTMFFrame, LLMContextFrame, VADUserStartedSpeakingFrame
from pipecat.processors.frame_processor import FrameDirection

from agent.echo import EchoAgentConfig, EchoAgentProcessor, last_user_text
from pipeline.builder import PipelineConfig
from pipeline.frames import TransferCallFrame
from pipeline.audio.g711 import ulaw_decode
from telephony.sip import SipConfig, SipServer
from telephony.sip.headers import NameAddr
from telephony.sip.message import SipRequest, SipResponse, parse_message
from telephony.sip.rtp import RtpPacket

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
                   extra: tuple[str, ...] = (), timeout_s: float = 30.0, via_port: int | None = None) -> SippResult:
    """Place one call with sipp at ``server`` (or at a proxy on ``via_port`` in front of it);
    returns sipp's exit code (0: the scenario passed)."""
    (workdir / "pcap").mkdir(parents=True, exist_ok=True)
    for pcap in PCAP_DIR.glob("*.pcap"):
        target = workdir / "pcap" / pcap.name
        if not target.exists():
            shutil.copy(pcap, target)
    args = ["sipp", f"127.0.0.1:{via_port or server.port}", "-i", "127.0.0.1", "-p", str(free_udp_port()),
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


@dataclass
class Callee:
    uri: str
    port: int
    proc: asyncio.subprocess.Process
    workdir: Path

    async def result(self, timeout_s: float = 20.0) -> SippResult:
        async with asyncio.timeout(timeout_s):
            out, err = await self.proc.communicate()
        errors = self.workdir / "sipp_errors.log"
        return SippResult(self.proc.returncode or 0, out.decode(errors="replace"),
                          err.decode(errors="replace") + (errors.read_text(errors="replace") if errors.exists() else ""))


@contextlib.asynccontextmanager
async def callee(scenario: str, workdir: Path, *, rtp_port: int = 9, calls: int = 1, timeout_s: int = 20,
                 message_log: Path | None = None) -> AsyncIterator[Callee]:
    """sipp as the callee (a UAS running ``scenario``) on a free loopback port until the block
    ends. The SDP it answers with names ``rtp_port`` for its audio. sipp exits once ``calls``
    calls have run the scenario; ``message_log``: every message it sent and received, timed."""
    (workdir / "pcap").mkdir(parents=True, exist_ok=True)
    for pcap in PCAP_DIR.glob("*.pcap"):
        shutil.copy(pcap, workdir / "pcap" / pcap.name)
    port = free_udp_port()
    args = ["sipp", "-sf", str(SCENARIOS / scenario), "-i", "127.0.0.1", "-p", str(port), "-mp", str(free_udp_port()),
            "-m", str(calls), "-nostdin", "-timeout", f"{timeout_s}s", "-timeout_error", "-trace_err",
            "-error_file", str(workdir / "sipp_errors.log"), "-key", "rtp_port", str(rtp_port)]
    if message_log is not None:
        args += ["-trace_msg", "-message_file", str(message_log)]
    proc = await asyncio.create_subprocess_exec(*args, cwd=workdir, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        await _bound(port, proc)
        yield Callee(f"sip:alice@127.0.0.1:{port}", port, proc, workdir)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@dataclass(frozen=True)
class LoggedMessage:
    """One message in sipp's ``-trace_msg`` log: when, which way (sipp ``sent`` or ``received``), what."""

    at: datetime
    sent: bool
    message: SipRequest | SipResponse


_LOG_HEAD = re.compile(r"^-{20,} (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)$", re.MULTILINE)


def sipp_messages(path: Path) -> list[LoggedMessage]:
    """The messages of a sipp ``-message_file``, in order."""
    text = path.read_text(errors="replace") if path.exists() else ""
    heads = list(_LOG_HEAD.finditer(text))
    out = []
    for head, nxt in zip(heads, heads[1:] + [None]):
        block = text[head.end():nxt.start() if nxt is not None else len(text)].lstrip("\n")
        direction, _, raw = block.partition("\n")
        raw = raw.lstrip("\n").rstrip("\n")
        head_part, sep, body = raw.partition("\n\n")
        wire = head_part.replace("\n", "\r\n") + "\r\n\r\n" + (body.replace("\n", "\r\n") + "\r\n" if body else "")
        out.append(LoggedMessage(datetime.strptime(head[1], "%Y-%m-%d %H:%M:%S.%f"), "sent" in direction,
                                 parse_message(wire.encode())))
    return out


async def _bound(port: int, proc: asyncio.subprocess.Process, timeout_s: float = 5.0) -> None:
    """Until sipp holds its UDP port (binding it ourselves fails then); sipp exiting first (a
    scenario it refused) fails the test with what it said."""
    async with asyncio.timeout(timeout_s):
        while True:
            if proc.returncode is not None:
                _, err = await proc.communicate()
                pytest.fail(f"sipp exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    return
            await asyncio.sleep(0.05)


class RtpSink(asyncio.DatagramProtocol):
    """Where the callee's SDP sends parley's audio: keeps every RTP packet."""

    def __init__(self) -> None:
        self.packets: list[RtpPacket] = []

    def datagram_received(self, data: bytes, addr) -> None:
        self.packets.append(RtpPacket.parse(data))

    def rms(self) -> float:
        pcm = np.concatenate([ulaw_decode(p.payload) for p in self.packets if p.payload_type == 0])
        return float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)))


class UdpPeer(asyncio.DatagramProtocol):
    """A raw SIP peer for tests that write their own messages: ``await UdpPeer.open()``,
    ``peer.send(bytes_or_message, server)``, ``await peer.responses()``."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[bytes, tuple[str, int]]] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None
        self.port = 0

    @classmethod
    async def open(cls) -> "UdpPeer":
        transport, peer = await asyncio.get_running_loop().create_datagram_endpoint(
            cls, local_addr=("127.0.0.1", 0))
        peer.transport = transport
        peer.port = transport.get_extra_info("sockname")[1]
        return peer

    def datagram_received(self, data: bytes, addr) -> None:
        self.queue.put_nowait((data, (addr[0], addr[1])))

    def send(self, message: bytes | SipRequest | SipResponse, server: SipServer | int) -> None:
        assert self.transport is not None
        port = server if isinstance(server, int) else server.port
        self.transport.sendto(bytes(message), ("127.0.0.1", port))

    async def messages(self, timeout_s: float, until=None) -> list[SipRequest | SipResponse]:
        """What arrives within ``timeout_s`` (or until ``until(message)`` is true)."""
        out: list[SipRequest | SipResponse] = []
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    msg = parse_message((await self.queue.get())[0])
                    out.append(msg)
                    if until is not None and until(msg):
                        return out
        except TimeoutError:
            return out

    async def responses(self, timeout_s: float = 5.0) -> list[SipResponse]:
        """Responses up to and including the first final one (or what came in ``timeout_s``)."""
        got = await self.messages(timeout_s, until=lambda m: isinstance(m, SipResponse) and m.status >= 200)
        assert all(isinstance(m, SipResponse) for m in got), got
        return got  # type: ignore[return-value]

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def branch() -> str:
    return "z9hG4bK" + os.urandom(6).hex()


OFFER = (b"v=0\r\no=peer 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
         b"m=audio 9 RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n")


def invite(peer: UdpPeer, call_id: str, *, via_branch: str | None = None, sent_by: str | None = None,
           from_tag: str = "peer", cseq: int = 1, body: bytes = OFFER, extra: tuple = ()) -> SipRequest:
    """An INVITE from ``peer`` (its SDP names port 9, where nothing listens)."""
    headers = (("Via", f"SIP/2.0/UDP {sent_by or f'127.0.0.1:{peer.port}'};branch={via_branch or branch()}"),
               ("Max-Forwards", "70"), ("From", f"<sip:peer@127.0.0.1>;tag={from_tag}"),
               ("To", "<sip:parley@127.0.0.1>"), ("Call-ID", call_id), ("CSeq", f"{cseq} INVITE"),
               ("Contact", f"<sip:peer@127.0.0.1:{peer.port}>")) + tuple(extra)
    if body:
        headers += (("Content-Type", "application/sdp"),)
    return SipRequest(method="INVITE", uri="sip:parley@127.0.0.1", headers=headers, body=body)


def in_dialog(method: str, ok: SipResponse, cseq: int, port: int, *, via_branch: str | None = None) -> SipRequest:
    """ACK / BYE for the dialog a 2xx (or any final answer) made, sent from ``port``."""
    contact = NameAddr.parse(ok.header("contact") or "<sip:parley@127.0.0.1>").uri
    return SipRequest(method=method, uri=contact, headers=(
        ("Via", f"SIP/2.0/UDP 127.0.0.1:{port};branch={via_branch or branch()}"),
        ("Max-Forwards", "70"), ("From", ok.header("from") or ""), ("To", ok.header("to") or ""),
        ("Call-ID", ok.call_id), ("CSeq", f"{cseq} {method}")))


KAMAILIO_CFG = """#!KAMAILIO
debug=2
log_stderror=yes
children=1
auto_aliases=no
listen=udp:127.0.0.1:{port}
mpath="{modules}"
loadmodule "pv.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "siputils.so"
loadmodule "textops.so"
loadmodule "xlog.so"

request_route {{
    if (has_totag()) {{
        if (loose_route()) {{
            xlog("L_NOTICE", "LOOSE-ROUTED $rm $ru\\n");
            forward();
            exit;
        }}
        $du = "sip:127.0.0.1:{target}";  # sipp sends its in-dialog requests here, with no Route
        forward();
        exit;
    }}
    if (is_method("INVITE")) {{
        record_route();
    }}
    $du = "sip:127.0.0.1:{target}";
    forward();
}}
"""
KAMAILIO_MODULES = Path("/usr/lib/x86_64-linux-gnu/kamailio/modules")


@dataclass
class Proxy:
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.asynccontextmanager
async def kamailio_proxy(target_port: int, workdir: Path):
    """A real Kamailio SIP proxy on 127.0.0.1 that Record-Routes INVITEs (loose routing) and
    forwards, statelessly, to ``target_port``; its log says what it loose-routed."""
    port = free_udp_port()
    async with kamailio(KAMAILIO_CFG.format(port=port, target=target_port, modules=f"{KAMAILIO_MODULES}/"),
                        workdir) as log_path:
        yield Proxy(port, log_path)


@contextlib.asynccontextmanager
async def kamailio(config: str, workdir: Path, *, needs: tuple[str, ...] = ()):
    """Kamailio running ``config`` (written to ``workdir``) until the block ends; yields its log's
    path once it listens. Skips the test when Kamailio or a module in ``needs`` is missing."""
    if shutil.which("kamailio") is None or not KAMAILIO_MODULES.is_dir() or \
            any(not (KAMAILIO_MODULES / m).exists() for m in needs):
        pytest.skip("kamailio (or a module it needs) is not installed (scripts/install-system-deps)")
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "kamailio.cfg"
    cfg.write_text(config)
    log_path = workdir / "kamailio.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            "kamailio", "-f", str(cfg), "-DD", "-E", "-Y", str(workdir), "-w", str(workdir),
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        async with asyncio.timeout(15):
            while "Listening on" not in log_path.read_text(errors="replace"):
                assert proc.returncode is None, log_path.read_text(errors="replace")[-2000:]
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # its worker processes start after it lists its sockets
        yield log_path
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        async with asyncio.timeout(10):
            await proc.wait()


async def hang_up(peer: UdpPeer, server: SipServer, ok: SipResponse, *, ack: bool = True) -> SipResponse:
    """End the dialog ``ok`` (a 2xx to ``peer``'s INVITE) made: its ACK (unless sent already),
    then a BYE answered 200; returns once the call has left ``server.live``."""
    cseq = ok.cseq[0]
    if ack:
        peer.send(in_dialog("ACK", ok, cseq, peer.port), server)
    peer.send(in_dialog("BYE", ok, cseq + 1, peer.port), server)
    got = await peer.messages(5.0, until=lambda m: isinstance(m, SipResponse) and m.cseq == (cseq + 1, "BYE"))
    bye_ok = got[-1] if got else None  # (a retransmitted 200 to the INVITE may come first)
    assert isinstance(bye_ok, SipResponse) and bye_ok.status == 200 and bye_ok.cseq == (cseq + 1, "BYE"), got
    await wait_for(lambda: ok.call_id not in server.live)
    return bye_ok


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
