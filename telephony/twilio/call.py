"""One Twilio call, from the WebSocket handshake to the last word: the Twilio edge of the call core.

:func:`read_start` reads the stream's ``connected`` and ``start``; :class:`TwilioCall` is the
:class:`~telephony.core.supervisor.CallSupervisor` over the stream: the socket closing (or
``stop``) hangs up; when the agent ends the call its last words play out before the socket
closes (Twilio stops playing when the stream does), and a transfer the agent asked for goes
through Twilio's REST API after that. A warm transfer runs while the agent's pipeline does
(:mod:`telephony.twilio.warm`: the caller on hold, the person briefed on their own stream, then
both joined in a conference); joined, the stream's ``stop`` is the agent leaving, not a hang-up.

A call parley placed (``CallServer.answering_plans`` gives it a plan: the agent spec's
``voicemail:``) is screened before the agent starts, as a SIP dial is
(:mod:`telephony.sip.dialer`): the callee's audio, read from the stream, goes to parley's answering
detector (:func:`telephony.core.screening.screen`), and Twilio's answering-machine result
(``AnsweredBy`` on the async AMD callback, :meth:`TwilioCall.answered_by_reported`) ends the
screening whenever it comes first. Twilio's ``human`` greets; ``machine_end_beep``,
``machine_end_silence`` and ``machine_end_other`` mean the greeting and its beep are over: the
plan's message is spoken at once (:class:`~pipeline.voicemail.VoicemailMessageProcessor`, no
barge-in) and the stream closed once it has played; ``fax`` hangs up; ``unknown`` does what the
plan says for nobody. Without Twilio's answer (no AMD asked for, or it comes late) the detector
decides as on SIP. The record keeps ``answered_by`` (Twilio's word when it decided, else the
detector's ``human``/``machine``/``unknown``) and ``voicemail_left``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, Literal

from aiohttp import WSMsgType, web
from pipecat.processors.frame_processor import FrameProcessor

from pipeline.answering import Decision
from pipeline.audio.g711 import ulaw_decode
from pipeline.builder import PipelineConfig
from pipeline.frames import TransferCallFrame
from pipeline.records import CallStore
from telephony.calls import AgentFactory, AnsweringPlanFactory, CallControl
from telephony.core.screening import ScreenedCall, screen
from telephony.errors import HandshakeError, ProtocolError, TelephonyError
from telephony.metrics import Metrics
from telephony.twilio.messages import Connected, Dtmf, Media, MediaFormat, Start, Stop, parse_twilio
from telephony.twilio.signature import ANSWER_PARAM
from telephony.twilio.transport import SAMPLE_RATE_HZ, TwilioTransport, drain_playout
from telephony.twilio.warm import WarmTransfer, WarmTransfers

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
MAX_HANDSHAKE_MESSAGES = 20
AMD_MACHINE: Final = ("machine_end_beep", "machine_end_silence", "machine_end_other")

Answerer = Literal["human", "machine", "fax", "unknown"]


def answerer(answered_by: str) -> Answerer:
    """Twilio's ``AnsweredBy`` as the screening acts on it: ``human``; ``machine`` (the
    ``machine_end_*`` results DetectMessageEnd gives, once the greeting is over); ``fax``; anything
    else (``unknown``, a value Twilio adds later) is ``unknown``."""
    if answered_by == "human":
        return "human"
    if answered_by == "fax":
        return "fax"
    return "machine" if answered_by in AMD_MACHINE else "unknown"


async def read_start(ws: web.WebSocketResponse, peer: str) -> Start:
    """Read ``connected`` then ``start``; skip (and log) garbage, give up after a timeout."""
    async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
        for _ in range(MAX_HANDSHAKE_MESSAGES):
            msg = await ws.receive()
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                raise HandshakeError(f"stream from {peer} closed before 'start'")
            try:
                message = parse_twilio(msg.data)
            except ProtocolError as exc:
                log.warning("[%s] bad message before 'start' skipped: %s", peer, exc)
                continue
            if isinstance(message, Start):
                fmt = message.media_format
                if fmt != MediaFormat():  # anything else would be decoded as mu-law: noise
                    raise HandshakeError(f"stream {message.call_sid[:40]} from {peer} sends {fmt.encoding[:40]} at "
                                         f"{fmt.sample_rate_hz} Hz, {fmt.channels} channel(s); parley takes "
                                         "audio/x-mulaw at 8000 Hz, mono")
                return message
            if not isinstance(message, Connected):
                log.warning("[%s] %s before 'start' skipped", peer, type(message).__name__)
    raise HandshakeError(f"no 'start' in the first {MAX_HANDSHAKE_MESSAGES} messages from {peer}")


class TwilioCall(ScreenedCall):
    """Runs one call's pipeline over its socket and keeps its record current."""

    transport_name = "twilio"

    def __init__(self, ws: web.WebSocketResponse, start: Start, *, agent_factory: AgentFactory,
                 pipeline_config: PipelineConfig, store: CallStore, reraise: bool = False,
                 metrics: Metrics | None = None, call_control: CallControl | None = None,
                 handoff: Callable[[str, TransferCallFrame], None] | None = None,
                 answering_plans: AnsweringPlanFactory | None = None,
                 warm_transfers: WarmTransfers | None = None):
        self.start = start
        self.ws = ws
        self._call_control = call_control
        self._handoff = handoff
        self._warm_transfers = warm_transfers
        self.warm: WarmTransfer | None = None      # a warm transfer in progress or joined
        self._warm_task: asyncio.Task | None = None
        self._warm_refused: str | None = None      # why a warm transfer went blind
        self._answering_plans = answering_plans   # a call parley placed: screened (module docstring)
        self._amd: str | None = None               # Twilio's AnsweredBy, once its callback came
        transport = TwilioTransport(ws, start, call_id=start.call_sid, on_closed=self.hang_up)
        link = transport.link
        super().__init__(call_id=start.call_sid, transport=transport, tracker=link.tracker,
                         frames=link.stats.frames, stats=link.stats.as_dict, agent_factory=agent_factory,
                         pipeline_config=pipeline_config, store=store, metrics=metrics,
                         params={k: v for k, v in start.custom_parameters.items() if k != ANSWER_PARAM},
                         reraise=reraise)
        transport.input().on_transfer = self._on_transfer

    @property
    def link(self):
        return self.transport.link

    # -- a warm transfer --------------------------------------------------------------------------

    async def _on_transfer(self, frame: TransferCallFrame) -> bool:
        """The agent asked for a transfer: a warm one runs here while the pipeline goes on (True);
        anything else ends the pipeline and hands the call over after it (False)."""
        if frame.mode != "warm":
            return False
        if self.warm is not None:
            log.warning("[%s] a warm transfer is already under way; this one ignored", self.call_id)
            return True
        transfers = self._warm_transfers
        self._warm_refused = transfers.unavailable(frame) if transfers is not None else "it is not set up here"
        if transfers is None or self._warm_refused is not None:
            return False
        self.warm = transfers.start(self, frame)
        self._warm_task = asyncio.get_running_loop().create_task(self.warm.run(), name=f"warm-{self.call_id}")
        return True

    # -- who answered a call parley placed: a person, a machine, a fax, nobody -------------------

    def answered_by_reported(self, answered_by: str) -> None:
        """Twilio's answering-machine callback came (``AnsweredBy``): the first one counts."""
        if self._amd is None:
            self._amd = answered_by

    async def _run_pipeline(self, agent: FrameProcessor | None = None, config: PipelineConfig | None = None) -> None:
        """With an answering plan, screen the answer first (module docstring), then run the agent,
        leave the message, or hang up."""
        factory = self._answering_plans
        plan = factory(self.info) if factory is not None and agent is None else None
        if plan is None:
            await super()._run_pipeline(agent, config)
            return
        reported = self.record.dial.get("answered_by")
        if self._amd is None and isinstance(reported, str) and reported:
            self._amd = reported                   # Twilio's callback came before the stream
        decision: Decision | None = None
        if self._amd is None:
            decision = await screen(self._read_audio, plan.detector,
                                    ended=lambda: self.end_reason is not None or self._amd is not None,
                                    on_decision=self._on_decision, first_only=plan.on_machine == "hang_up",
                                    words=await self._screening_words())
        if self.end_reason is not None:            # the callee hung up (or we did) meanwhile
            return
        kind: Answerer
        if decision is None:                       # Twilio's answer came first: it decides
            assert self._amd is not None
            kind = answerer(self._amd)
            self.record.answered_by = self._amd
            log.info("[%s] answered by %s (Twilio's answering-machine detection)", self.call_id, self._amd)
        else:
            kind = decision.kind
        self.sync()
        await self._act_on(kind, plan)

    def _on_decision(self, decision: Decision) -> None:
        if self.record.answered_by is None:
            self.record.answered_by = decision.kind
        log.info("[%s] answered by %s at %.2f s (%s): %s", self.call_id, decision.kind, decision.at_s,
                 "final" if decision.final else "first", decision.reason)

    async def _read_audio(self, timeout_s: float) -> bytes | None:
        """The callee's next 20 ms from the stream (into the recording too), or None when none
        came in time or the stream ended (``stop`` or the socket closing hang up). The pipeline's
        input reads the socket after this; a key pressed while screening reaches nobody."""
        link = self.link
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.end_reason is None:
            left = deadline - loop.time()
            if left <= 0:
                return None
            try:
                msg = await self.ws.receive(timeout=left)
            except TimeoutError:
                return None
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                link.closed_reason = link.closed_reason or f"socket {msg.type.name.lower()}"
                await self.hang_up(link.closed_reason)
                return None
            try:
                message = parse_twilio(msg.data)
            except ProtocolError:
                link.stats.bad_messages += 1
                continue
            if isinstance(message, Media):
                link.stats.media_in += 1
                pcm = ulaw_decode(message.payload).tobytes()
                if self.recorder is not None:
                    self.recorder.caller(pcm, SAMPLE_RATE_HZ)
                return pcm
            if isinstance(message, Stop):
                link.closed_reason = "caller hung up (stop)"
                await self.hang_up(link.closed_reason)
                return None
            if isinstance(message, Dtmf):
                link.stats.dtmf.append(message.digit)
                if self.recorder is not None:
                    self.recorder.key_pressed()
        return None

    # -- the end ---------------------------------------------------------------------------------

    async def _pipeline_ended(self) -> str | None:
        if self.warm is not None and self.warm.joined:   # the agent left; the call is in the conference
            return self.warm.end_reason
        link = self.link
        played = await drain_playout(link)  # let the last words play before the socket closes
        if link.closed_reason is not None:  # the caller hung up while they played
            return link.closed_reason
        if self._message is not None:       # it ended the pipeline once the message's audio went out
            self.record.voicemail_left = self._message.spoken and played
            return "voicemail message left" if self.record.voicemail_left else "the voicemail message did not play"
        if link.pending_transfer is not None:
            return await self._transfer(link.pending_transfer)
        return None

    async def _close(self) -> None:
        if self.warm is not None:
            await self.warm.close(self.end_reason or "call ended", self._warm_task)
        if not self.ws.closed:
            await self.ws.close()

    async def _transfer(self, transfer: TransferCallFrame) -> str:
        """Hand the caller over (Twilio replaces the call's TwiML; the stream then closes).

        A warm transfer that cannot be done here (``WarmTransfers.unavailable``: no account, no
        public URL, not a phone number) is carried out blind, and the record says so."""
        where = f"{transfer.kind}:{transfer.target}"
        if transfer.mode == "warm":
            note = "warm transfer is not available over Twilio: transferred blind"
            log.warning("[%s] %s (%s)", self.call_id, note, self._warm_refused or "not set up")
            self.record.errors.append(note)
            self.record.transfer = {"mode": "blind", "requested": "warm", "target": transfer.target}
        if self._call_control is None:
            if self._handoff is not None:   # the stream closes; Twilio then asks <Connect action> what next
                self._handoff(self.call_id, transfer)
                log.info("[%s] handing off to %s on the stream's action callback", self.call_id, where)
                return f"handed to Twilio: {where}"
            message = f"transfer to {where} requested, but no Twilio account is configured (TWILIO_ACCOUNT_SID)"
            log.error("[%s] %s", self.call_id, message)
            self.record.errors.append(message)
            return "agent ended the call (transfer not configured)"
        try:
            await self._call_control.transfer(self.call_id, transfer.kind, transfer.target)
        except TelephonyError as exc:
            log.error("[%s] transfer to %s failed: %s", self.call_id, where, exc)
            self.record.errors.append(f"transfer to {where} failed: {exc}")
            return "agent ended the call (transfer failed)"
        log.info("[%s] transferred to %s", self.call_id, where)
        return f"transferred to {where}"
