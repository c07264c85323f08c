"""Outbound calls: how soon does the agent speak once a person answers, and do many calls at once
all get placed, end, and deliver all their audio?

    .venv/bin/python benchmarks/bench_outbound.py [--calls 20] [--concurrent 16] [--agent echo]
        [--stt ssm] [--tts ssm] [--quick]

A real ``parley serve`` on loopback places every call through ``POST /calls``, as a CRM or a
campaign does:

- over SIP, to a callee user agent written here (one UDP socket, one RTP socket per call): it
  answers 200 with SDP at once, then listens for ``--listen-s`` and hangs up with BYE;
- over Twilio, through the REST stand-in (``harness/twilio_rest.py``), which answers, opens the
  media stream as Twilio would (``connected``, ``start``) and listens with the scripted caller.

Measured, for each transport:

- ``first_word_ms``: p50/p95/p99 from the answer (SIP: the callee's 200 OK sent; Twilio: the
  stream's ``start`` sent) to the first agent audio with speech energy received, over ``--calls``
  calls placed one after another (a warm-up call first, not counted);
- ``concurrent``: ``--concurrent`` calls placed at once: how many were placed (202), reached a final
  state (the record ended), and whether audio was dropped: what the agent sent (the record's
  ``rtp_out`` / ``media_out_bytes``) against what the callee received, and RTP sequence gaps;
  first_word_ms under that load too.

Who answered (person or machine) and how fast that is decided is ``bench_answering.py``'s question;
this bench's callee is a person who listens (the agent's spec here has no ``voicemail:`` section).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import git_sha, percentiles  # noqa: E402

from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.callers.twilio import TwilioCaller  # noqa: E402
from harness.twilio_rest import Scenario, TwilioRestStandIn  # noqa: E402
from pipeline.audio.g711 import ulaw_decode  # noqa: E402
from telephony.sip.headers import NameAddr  # noqa: E402
from telephony.sip.message import SipRequest, SipResponse, parse_message, response_to  # noqa: E402
from telephony.sip.rtp import RtpPacket  # noqa: E402
from telephony.twilio.messages import Start  # noqa: E402
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature  # noqa: E402

ACCOUNT = "AC" + "0" * 32
TOKEN = "bench-outbound-" + "0" * 17
API_TOKEN = "bench-outbound-api-token"
SPEECH_RMS = 300.0          # a 20 ms frame louder than this is speech (mu-law silence decodes to ~0)


def speech(payload: bytes) -> bool:
    pcm = ulaw_decode(payload).astype(np.float64)
    return bool(pcm.size) and float(np.sqrt(np.mean(pcm ** 2))) > SPEECH_RMS


# -- the SIP callee -----------------------------------------------------------------------------

@dataclass
class CalleeCall:
    invite: SipRequest
    answered_ns: int = 0
    first_speech_ns: int | None = None
    packets: int = 0
    seqs: list[int] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def seq_gaps(self) -> int:
        """Packets missing between the first and last sequence number received (16-bit wrap)."""
        if not self.seqs:
            return 0
        span = (self.seqs[-1] - self.seqs[0]) % 65536 + 1
        return max(0, span - len(set(self.seqs)))


class _Rtp(asyncio.DatagramProtocol):
    def __init__(self, call: CalleeCall) -> None:
        self.call = call

    def datagram_received(self, data: bytes, addr) -> None:
        packet = RtpPacket.parse(data)
        if packet.payload_type != 0:
            return
        self.call.packets += 1
        self.call.seqs.append(packet.sequence)
        if self.call.first_speech_ns is None and speech(packet.payload):
            self.call.first_speech_ns = time.perf_counter_ns()


class SipCallee(asyncio.DatagramProtocol):
    """Answers every INVITE at once (200 with SDP naming a fresh RTP socket), listens
    ``listen_s``, then hangs up with BYE; answers parley's BYE with 200."""

    def __init__(self, listen_s: float) -> None:
        self.listen_s = listen_s
        self.calls: dict[str, CalleeCall] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self.port = 0
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    async def open(cls, listen_s: float) -> SipCallee:
        transport, callee = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: cls(listen_s), local_addr=("127.0.0.1", 0))
        callee.transport, callee.port = transport, transport.get_extra_info("sockname")[1]
        return callee

    def datagram_received(self, data: bytes, addr) -> None:
        msg = parse_message(data)
        if isinstance(msg, SipRequest) and msg.method == "INVITE" and msg.call_id not in self.calls:
            call = self.calls[msg.call_id] = CalleeCall(msg)
            task = asyncio.get_running_loop().create_task(self._run(call, addr))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(msg, SipRequest) and msg.method == "BYE":
            self._send(response_to(msg, 200), addr)
            if msg.call_id in self.calls:
                self.calls[msg.call_id].ended.set()
        elif isinstance(msg, SipResponse) and msg.cseq[1] == "BYE" and msg.call_id in self.calls:
            self.calls[msg.call_id].ended.set()

    def _send(self, msg: SipRequest | SipResponse, addr) -> None:
        assert self.transport is not None
        self.transport.sendto(bytes(msg), addr)

    async def _run(self, call: CalleeCall, addr) -> None:
        loop = asyncio.get_running_loop()
        rtp, _ = await loop.create_datagram_endpoint(lambda: _Rtp(call), local_addr=("127.0.0.1", 0))
        rtp_port = rtp.get_extra_info("sockname")[1]
        sdp = (f"v=0\r\no=callee 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
               f"m=audio {rtp_port} RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"
               f"a=rtpmap:101 telephone-event/8000\r\n").encode()
        tag = f"callee{random.getrandbits(32):08x}"
        ok = response_to(call.invite, 200, to_tag=tag, body=sdp, headers=(
            ("Contact", f"<sip:callee@127.0.0.1:{self.port}>"), ("Content-Type", "application/sdp")))
        self._send(ok, addr)
        call.answered_ns = time.perf_counter_ns()
        try:
            await asyncio.wait_for(call.ended.wait(), self.listen_s)
        except TimeoutError:
            contact = NameAddr.parse(call.invite.header("contact") or "").uri
            bye = SipRequest(method="BYE", uri=contact, headers=(
                ("Via", f"SIP/2.0/UDP 127.0.0.1:{self.port};branch=z9hG4bK{random.getrandbits(48):012x}"),
                ("Max-Forwards", "70"), ("From", ok.header("to") or ""), ("To", ok.header("from") or ""),
                ("Call-ID", call.invite.call_id), ("CSeq", "1 BYE")))
            for _ in range(4):      # sent again until answered (UDP)
                self._send(bye, addr)
                try:
                    await asyncio.wait_for(call.ended.wait(), 0.5)
                    break
                except TimeoutError:
                    continue
        await asyncio.sleep(0.5)    # the last packets in flight
        rtp.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# -- the Twilio leg: the stand-in's caller, timed ------------------------------------------------

TIMED: dict[str, TimedCaller] = {}


class TimedCaller(TwilioCaller):
    """The stand-in's scripted caller, noting when ``start`` went and the first speech came."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.start_ns = 0
        self.first_speech_ns: int | None = None
        TIMED[self.call_sid] = self

    async def _send(self, msg) -> bool:
        sent = await super()._send(msg)
        if isinstance(msg, Start):
            self.start_ns = time.perf_counter_ns()
        return sent

    def _on_media(self, payload: bytes, now: float) -> None:
        super()._on_media(payload, now)
        if self.first_speech_ns is None and payload and speech(payload):
            self.first_speech_ns = time.perf_counter_ns()


# -- placing calls --------------------------------------------------------------------------------

@dataclass
class Placed:
    status: int
    call_id: str | None
    first_word_ms: float | None = None
    ended: bool = False
    sent: int = 0            # what the agent sent: RTP packets, or Twilio media bytes
    received: int = 0        # what the callee received, in the same unit
    seq_gaps: int = 0


async def _post_call(http: aiohttp.ClientSession, port: int, to: str) -> tuple[int, str | None]:
    body = {"to": to} if to.startswith("sip:") else {"to": to, "from": "+15550100"}   # Twilio's: a number of the account
    async with http.post(f"http://127.0.0.1:{port}/calls", json=body,
                         headers={"Authorization": f"Bearer {API_TOKEN}"}) as resp:
        body = await resp.json(content_type=None)
        return resp.status, body.get("call_id") if isinstance(body, dict) else None


async def _record(http: aiohttp.ClientSession, port: int, call_id: str, timeout_s: float = 15.0) -> dict:
    url = f"http://127.0.0.1:{port}/calls/{call_id}"
    data: dict = {}
    for _ in range(int(timeout_s / 0.3)):
        async with http.get(url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}) as resp:
            data = await resp.json(content_type=None) if resp.status == 200 else {}
        if data.get("ended"):
            return data
        await asyncio.sleep(0.3)
    return data


async def sip_call(http, port: int, callee: SipCallee, n: int) -> Placed:
    status, call_id = await _post_call(http, port, f"sip:bench{n}@127.0.0.1:{callee.port}")
    if status != 202 or call_id is None:
        return Placed(status, call_id)
    async with asyncio.timeout(callee.listen_s + 20):
        for _ in range(500):              # its INVITE: at once, or 10 s at most
            if call_id in callee.calls:
                break
            await asyncio.sleep(0.02)
        call = callee.calls[call_id]
        await call.ended.wait()
    await asyncio.sleep(0.6)
    record = await _record(http, port, call_id)
    first = None if call.first_speech_ns is None else (call.first_speech_ns - call.answered_ns) / 1e6
    return Placed(status, call_id, first, bool(record.get("ended")), int(record.get("stats", {}).get("rtp_out", 0)),
                  call.packets, call.seq_gaps())


async def twilio_call(http, port: int, twilio: TwilioRestStandIn, n: int) -> Placed:
    status, call_id = await _post_call(http, port, f"+1555010{n:04d}")
    if status != 202 or call_id is None:
        return Placed(status, call_id)
    async with asyncio.timeout(60):
        for _ in range(500):              # the stand-in took the create request before answering it
            if any(c.sid == call_id for c in twilio.calls):
                break
            await asyncio.sleep(0.02)
        stand_in = next(c for c in twilio.calls if c.sid == call_id)
        await stand_in.done.wait()
    record = await _record(http, port, call_id)
    caller = TIMED.get(call_id)
    first = None if caller is None or caller.first_speech_ns is None else \
        (caller.first_speech_ns - caller.start_ns) / 1e6
    received = stand_in.report.media_bytes_received if stand_in.report is not None else 0
    return Placed(status, call_id, first, bool(record.get("ended")) and stand_in.status == "completed",
                  int(record.get("stats", {}).get("media_out_bytes", 0)), received)


def summary(placed: list[Placed]) -> dict:
    return {"calls": len(placed), "placed": sum(p.status == 202 for p in placed),
            "refused": sorted({p.status for p in placed if p.status != 202}),
            "ended": sum(p.ended for p in placed), "sent": sum(p.sent for p in placed),
            "received": sum(p.received for p in placed),
            "calls_short": sum(p.received < p.sent for p in placed), "seq_gaps": sum(p.seq_gaps for p in placed),
            "first_word_ms": percentiles([p.first_word_ms for p in placed])}


async def run(args: argparse.Namespace) -> dict:
    import harness.twilio_rest as stand_in_module

    stand_in_module.TwilioCaller = TimedCaller   # type: ignore[misc]  # the stand-in's caller, timed
    tmp = Path(tempfile.mkdtemp(prefix="bench-outbound-"))
    callee = await SipCallee.open(args.listen_s)
    out: dict = {}
    async with TwilioRestStandIn(ACCOUNT, TOKEN) as twilio:
        twilio.scenario_for = lambda form: Scenario(greeting_quiet_s=args.listen_s, call_timeout_s=args.listen_s + 30)
        port, sip_port = free_port(), free_port()
        server = ServeProcess("parley", [
            "-m", "deploy.cli", "serve", "--agent", args.agent, "--stt", args.stt, "--tts", args.tts,
            "--port", str(port), "--public-url", f"http://127.0.0.1:{port}", "--api-token", API_TOKEN,
            "--sip-port", str(sip_port), "--sip-host", "127.0.0.1", "--sip-rtp-ports", "41000-41999",
            "--max-calls", str(max(args.concurrent, 2) + 2), "--db", str(tmp / "calls.db")],
            port=port, log_path=tmp / "parley.log",
            env={"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": TOKEN, "TWILIO_API_BASE": twilio.base_url})
        try:
            await server.wait_ready(300)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                await sip_call(http, port, callee, 0)              # warm-up, not counted
                await twilio_call(http, port, twilio, 0)
                for name, one in (("sip", lambda n: sip_call(http, port, callee, n)),
                                  ("twilio", lambda n: twilio_call(http, port, twilio, n))):
                    serial = [await one(1 + n) for n in range(args.calls)]
                    burst = await asyncio.gather(*(one(1000 + n) for n in range(args.concurrent)))
                    out[name] = {"serial": summary(serial), "concurrent": summary(list(burst))}
        finally:
            server.stop()
            callee.close()
    if args.keep_logs:
        out["log"] = str(tmp / "parley.log")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20, help="calls one after another, per transport (default 20)")
    ap.add_argument("--concurrent", type=int, default=16, help="calls placed at once, per transport (default 16)")
    ap.add_argument("--listen-s", type=float, default=4.0, help="how long the callee listens before hanging up")
    ap.add_argument("--agent", default="echo", help="the agent (default: echo, which greets at once)")
    ap.add_argument("--stt", default="ssm")
    ap.add_argument("--tts", default="ssm")
    ap.add_argument("--quick", action="store_true", help="4 calls one after another, 4 at once: a smoke run")
    ap.add_argument("--keep-logs", action="store_true", help="say where the server's log is")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.quick:
        args.calls, args.concurrent = 4, 4
    random.seed(args.seed)
    started = time.perf_counter()
    result = asyncio.run(run(args))
    print(json.dumps({"bench": "outbound", "git_sha": git_sha(), "config": {
        "calls": args.calls, "concurrent": args.concurrent, "listen_s": args.listen_s, "agent": args.agent,
        "stt": args.stt, "tts": args.tts, "cpus": os.cpu_count()}, **result,
        "wall_s": round(time.perf_counter() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
