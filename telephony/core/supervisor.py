"""One call's life, whatever carries it: the per-call supervisor every transport's edge extends.

    class TwilioCall(CallSupervisor):
        transport_name = "twilio"
        async def _pipeline_ended(self) -> str | None: ...   # the agent hung up: finish the wire's side
        async def _close(self) -> None: ...                   # always, last: close the wire

    call = TwilioCall(call_id=..., transport=pipecat_transport, tracker=..., frames=..., ...)
    await call.run()                       # until the call ends; the record is kept throughout
    await call.hang_up("caller hung up")   # from the edge, when the far end left (first reason wins)
    await call.end_politely(farewell)      # the drain: the farewell after what is playing, then the end

``run`` is the same for every transport: ``_answer`` (the edge's pickup: SIP rings, answers and
may be cancelled), the call counted as live, the agent built by the factory, ``build_pipeline``,
pipecat's runner, then one of three endings:

- the far end left or we hung up (``hang_up``): the pipeline is cancelled, its reason recorded;
- the pipeline ended by itself (the agent said goodbye, a transfer, ``end_politely``): the edge's
  ``_pipeline_ended`` lets the last words play and finishes the wire's side (Twilio's transfer,
  SIP's BYE), and may name a more precise reason;
- something broke: this is the only catch-all in the call path. The traceback is logged with the
  call id, the reason is ``error: ...``, the call ends cleanly, and with ``reraise`` (tests) the
  error propagates after the clean-up.

Then, always: ``_close`` (the edge closes its wire), the record's end written, one log line.
The :class:`~telephony.callbook.CallBook` keeps the record and the server's metrics current as
the call goes, and the output transport (:class:`~telephony.core.output.PlayoutOutput`) writes
it whenever what the caller heard changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import ClassVar

from pipecat.frames.frames import EndFrame, Frame, TTSSpeakFrame
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.transports.base_transport import BaseTransport
from pipecat.workers.runner import WorkerRunner

from pipeline.builder import CallPipeline, PipelineConfig, build_pipeline
from pipeline.latency import TurnLatency
from pipeline.records import CallRecord, CallStore
from telephony.audio_meter import FrameCounts
from telephony.callbook import CallBook
from telephony.calls import AgentFactory, CallInfo
from telephony.core.output import PlayoutOutput, RecordedInput
from telephony.core.recorder import CallRecorder
from telephony.core.uploads import RecordingUploader
from telephony.metrics import Metrics
from telephony.playout import PlayoutTracker

log = logging.getLogger(__name__)

SHUTDOWN_REASON = "server shutting down"
RECORDING_CLOSE_S = 10.0
# with recordings_s3: how long the call's end waits (the wire already closed) for the upload, so
# the record's end and its webhook carry the s3:// URL; an upload that takes longer goes on, and
# the record is updated when it lands
UPLOAD_WAIT_S = 3.0


class CallSupervisor:
    """Runs one call's pipeline and keeps its record; a transport's edge fills in the hooks."""

    transport_name: ClassVar[str]

    def __init__(self, *, call_id: str, transport: BaseTransport, tracker: PlayoutTracker,
                 frames: FrameCounts, agent_factory: AgentFactory, pipeline_config: PipelineConfig,
                 store: CallStore, metrics: Metrics | None = None, params: dict[str, str] | None = None,
                 stats: Callable[[], dict[str, int]] | None = None,
                 on_turn: Callable[[TurnLatency], None] | None = None, reraise: bool = False):
        self.call_id = call_id
        self.transport = transport
        self.record = CallRecord(call_sid=call_id, transport=self.transport_name, params=dict(params or {}))
        self.book = CallBook(self.record, store, metrics or Metrics(), tracker=tracker, frames=frames,
                             stats=stats, on_turn=on_turn)
        self.latency = self.book.observe(transport.output())
        self.end_reason: str | None = None  # the first reason given wins
        self._agent_factory = agent_factory
        self._config = pipeline_config
        self._reraise = reraise
        self._worker: PipelineWorker | None = None
        self._pipeline_over = False
        self._polite_reason: str | None = None
        self.recorder: CallRecorder | None = None
        output = transport.output()
        if isinstance(output, PlayoutOutput):  # what was said or heard changed: write it down
            output.on_change = self.sync

    @property
    def pipeline_running(self) -> bool:
        """The pipeline is built and has not ended: frames pushed into it reach the agent."""
        return self._worker is not None and not self._pipeline_over

    @property
    def call_sid(self) -> str:
        """The record's id (Twilio's name for it)."""
        return self.call_id

    # -- what an edge may fill in ---------------------------------------------------------------

    async def _answer(self) -> bool:
        """Pick up; False when the call ended before it was answered (``end_reason`` says why)."""
        return True

    def _observers(self) -> list:
        """The pipeline's observers: the latency observer, and any the edge adds."""
        return [self.latency]

    def _built(self, built: CallPipeline) -> None:
        """The pipeline exists, not yet running."""

    async def _pipeline_ended(self) -> str | None:
        """The pipeline ended by itself: let the last words play, finish the wire's side.

        Returns a reason more precise than the agent's (a transfer, the caller hanging up during
        the last words), or None."""
        return None

    async def _on_hang_up(self, reason: str) -> None:
        """``hang_up`` was called: tell the far end, if it must be told (SIP's BYE)."""

    async def _close(self) -> None:
        """The call is over: close the wire. Runs once, whatever ended the call."""

    def answered_by_reported(self, answered_by: str) -> None:
        """Someone outside the media said who answered this call parley placed (Twilio's
        answering-machine callback); an edge that screens its outbound calls acts on it."""

    # -- the call -------------------------------------------------------------------------------

    async def run(self) -> None:
        log.info("[%s] %s call started (params %s)", self.call_id, self.transport_name, sorted(self.record.params))
        try:
            if await self._answer():
                self._start_recording()
                self.book.started()
                await self._run_pipeline()
        except asyncio.CancelledError:
            self.end_reason = self.end_reason or SHUTDOWN_REASON
            raise
        except Exception as exc:  # the per-call supervisor: log, end cleanly, keep the record
            self.end_reason = f"error: {type(exc).__name__}: {exc}"
            self.record.errors.append(self.end_reason)
            log.exception("[%s] call failed; ending it cleanly", self.call_id)
            if self._reraise:
                raise
        finally:
            self._pipeline_over = True
            try:
                await asyncio.shield(self._close())
            finally:
                try:
                    await asyncio.shield(self._stop_recording())
                finally:
                    self.book.ended(self.end_reason or "ended")
                log.info("[%s] %s call ended: %s (%d turns)", self.call_id, self.transport_name,
                         self.record.end_reason, len(self.record.turns))

    def _start_recording(self) -> None:
        """With ``recordings_dir`` set: open the call's recording and hook it to both sides."""
        folder = self._config.recordings_dir
        if folder is None:
            return
        try:
            self.recorder = CallRecorder.open(folder, self.call_id, sample_rate_hz=self._config.sample_rate_hz,
                                              fmt=self._config.recording_format)
        except OSError as exc:  # the call matters more than its recording
            log.error("[%s] cannot record the call in %s: %s", self.call_id, folder, exc)
            return
        output, input_ = self.transport.output(), self.transport.input()
        if isinstance(output, PlayoutOutput):
            output.recorder = self.recorder
        if isinstance(input_, RecordedInput):
            input_.recorder = self.recorder
        self.record.recording = str(self.recorder.path)
        recorder = self.recorder
        self.book.more_stats = lambda: {"recording_keys_silenced": recorder.keys_silenced}

    async def _stop_recording(self) -> None:
        """Close the recording and wait (off the loop) until it is whole on disk, so the record's
        end (and its webhook) points at a finished file."""
        if self.recorder is None:
            return
        if self.recorder.started_at_s is not None:  # the recording's second 0 on the call's timeline
            self.record.marks_s["recording_start"] = self.book.seconds(self.recorder.started_at_s)
        done = self.recorder.close()
        if not await asyncio.to_thread(done.wait, RECORDING_CLOSE_S):
            log.warning("[%s] the recording %s took over %.0f s to close", self.call_id, self.recorder.path,
                        RECORDING_CLOSE_S)
            return  # not whole yet: the next start's sweep uploads it
        await self._upload_recording()

    async def _upload_recording(self) -> None:
        """With ``recordings_s3``: hand the closed file to the server's uploader (its own thread)
        and give it ``UPLOAD_WAIT_S``; once stored, the record's ``recording`` is its s3:// URL."""
        s3, folder = self._config.recordings_s3, self._config.recordings_dir
        if s3 is None or folder is None or self.recorder is None:
            return
        uploaded = asyncio.wrap_future(RecordingUploader.shared(s3, folder).submit(self.recorder.path))
        try:
            async with asyncio.timeout(UPLOAD_WAIT_S):
                url = await asyncio.shield(uploaded)
        except TimeoutError:
            log.info("[%s] the recording's upload takes over %.0f s; the record gets its URL when it lands",
                     self.call_id, UPLOAD_WAIT_S)
            uploaded.add_done_callback(self._uploaded_late)
            return
        if url is not None:
            self.record.recording = url

    def _uploaded_late(self, uploaded: asyncio.Future) -> None:
        if not uploaded.cancelled() and uploaded.result() is not None:
            self.record.recording = uploaded.result()
            self.book.store.update(self.record)

    @property
    def info(self) -> CallInfo:
        """What the agent factory (and any other per-call factory) learns about this call."""
        return CallInfo(self.call_id, self.transport_name, dict(self.record.params))

    async def _run_pipeline(self, agent: FrameProcessor | None = None, config: PipelineConfig | None = None) -> None:
        """Build the pipeline and run it to its end: the factory's agent in the call's pipeline
        configuration, unless the edge gives another processor in the agent's place (an outbound
        call's voicemail message) or another configuration."""
        agent = agent or self._agent_factory(self.info)
        built = build_pipeline(self.transport, agent, config or self._config, observers=self._observers())
        self._built(built)
        self._worker = built.worker
        if self.end_reason is not None:  # the far end left while the pipeline was being built
            return
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(built.worker)
        await runner.run()
        self._pipeline_over = True
        if self.end_reason is None:  # it ended by itself: the agent, a transfer or end_politely
            reason = await self._pipeline_ended()
            self.end_reason = self.end_reason or reason or self._polite_reason or "agent ended the call"

    # -- ending it ------------------------------------------------------------------------------

    async def hang_up(self, reason: str) -> None:
        """End the call now: the far end left, or we hang up. The first reason is the one kept."""
        if self.end_reason is not None:
            return
        self.end_reason = reason
        await self._on_hang_up(reason)
        if self._worker is not None and not self._pipeline_over:
            await self._worker.cancel(reason=reason)

    async def end_politely(self, farewell: str, reason: str = SHUTDOWN_REASON) -> None:
        """Say ``farewell`` after what is playing, then end the call (the drain). Not yet
        talking (still ringing, or the pipeline not built): hang up at once."""
        if self.end_reason is not None or self._polite_reason is not None:
            return
        if self._worker is None or self._pipeline_over:
            await self.hang_up(reason)
            return
        log.info("[%s] ending the call: %s", self.call_id, reason)
        self._polite_reason = reason
        await self._worker.queue_frames([TTSSpeakFrame(farewell), EndFrame()])

    async def inject(self, frame: Frame) -> bool:
        """Push ``frame`` into the running pipeline at its start, as if the wire had brought it (a
        warm transfer's summary to speak, its outcome for the agent); False when none runs."""
        if self._worker is None or self._pipeline_over:
            return False
        await self._worker.queue_frame(frame)
        return True

    def sync(self) -> None:
        """Bring the record up to date (turns, words said and heard, counters)."""
        self.book.sync()


async def drain_calls(live: Callable[[], Iterable[CallSupervisor]], *, grace_s: float, farewell: str,
                      end_timeout_s: float = 15.0, what: str = "call") -> None:
    """SIGTERM's drain of live calls: ``grace_s`` to finish, then a farewell each, then wait.

    ``live`` lists the calls still live each time it is called (they leave it as they end)."""
    loop = asyncio.get_running_loop()
    calls = list(live())
    log.warning("draining: no new %ss; %d live %s(s) get %.0f s to finish", what, len(calls), what, grace_s)
    deadline = loop.time() + grace_s
    while list(live()) and loop.time() < deadline:  # noqa: ASYNC110 (calls leave plain dicts: no event)
        await asyncio.sleep(0.1)
    for call in list(live()):
        await call.end_politely(farewell)
    deadline = loop.time() + end_timeout_s
    while list(live()) and loop.time() < deadline:  # noqa: ASYNC110 (calls leave plain dicts: no event)
        await asyncio.sleep(0.1)
    left = sorted(c.call_id for c in live())
    if left:
        log.error("%d %s(s) did not end in time: %s", len(left), what, left)
