"""The call's own recogniser listening while an outbound call is screened: words for the answering
detector (``pipeline.answering``'s ``words``).

    backend = screening_recogniser(pipeline_config)        # None: the call's recogniser has no words here
    words = await GreetingWords.open(backend)              # one utterance of the shared engine (None: failed)
    det = AnsweringDetector(config, words=words.read)
    await words.push(pcm)                                  # the greedy partial grows
    det.push(pcm)
    words.heard_quiet(det.quiet_s)                         # the first pause: the final pass starts
    await words.aclose()

The streaming recogniser's greedy partials come every hop (200 ms, 280 ms behind the audio with
its look-ahead) and are rough. So, once, when the callee first pauses for ``final_after_s``
after speaking (a person's "hello?" then waiting, or a greeting's first sentence), the utterance
is finished: its final pass (Whisper's encoding of the whole greeting so far, beam-searched with
the LM) decodes it in the engine's final-pass worker while the detector's pause timer runs, and
its text replaces the partial from then on. On the bench's answers it took 65 ms (p50; 99 ms
p95) on an otherwise idle 2-core machine, so it is in well before the detector's ``human_pause_s``
(0.7 s) is over, and it turns a partial's garbled "lee er tessit" into "leave message"
(``benchmarks/RESULTS.md``, bench_answering). After it the words stay as they are: the rest of a
long greeting is for the length and beep rules.

Only parley's SSM recogniser is used (``stt`` "ssm", in process or on the model tier); with the
others the detector decides from timing and beeps alone.
"""

from __future__ import annotations

import asyncio
import logging

from pipeline.builder import PipelineConfig
from pipeline.engines.transcripts import RecognizerBackend, Utterance
from ssm_engine.stt.hints import NO_HINTS

__all__ = ["FINAL_AFTER_S", "GreetingWords", "screening_recogniser"]

log = logging.getLogger(__name__)

FINAL_AFTER_S = 0.3
"""Quiet after speech that starts the greeting's final pass (the detector's pause is 0.7 s)."""


def screening_recogniser(config: PipelineConfig) -> RecognizerBackend | None:
    """The recogniser a call with ``config`` runs, for its screening: the same shared engine
    (``SSMSTTEngine.shared`` with the same settings, or the model tier's), or None when the call's
    recogniser is not parley's own."""
    from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, SSMRecognizerBackend

    if config.stt == "ssm":
        return SSMRecognizerBackend(model_dir=config.stt_model_dir or DEFAULT_MODEL_DIR,
                                    decoder=config.stt_decoder, compile=config.stt_compile,
                                    runner=config.stt_runner)
    if config.stt == "remote":
        from pipeline.engines.remote_recognizer import RemoteRecognizerEngine

        return SSMRecognizerBackend(RemoteRecognizerEngine.shared(config.model_urls))
    return None


class GreetingWords:
    """One screening's words: the partial of an open utterance, then its final (module
    docstring). ``read`` is the detector's ``words`` callable. Errors of the recogniser are
    logged and end the words (the detector goes on with timing alone): screening must not fail
    because the recogniser did."""

    def __init__(self, utterance: Utterance, errors: tuple[type[Exception], ...] = (),
                 *, final_after_s: float = FINAL_AFTER_S, sample_rate_hz: int = 8000,
                 call_id: str = "") -> None:
        self._utt: Utterance | None = utterance
        self.call_id = call_id
        self._errors = errors
        self.final_after_s = final_after_s
        self.sample_rate_hz = sample_rate_hz
        self.text = ""
        self.final: str | None = None          # the final pass's text, once it came
        self._finishing: asyncio.Task[None] | None = None
        self.pushed_s = 0.0                    # audio the stream heard
        self.final_at_s: float | None = None   # audio heard when the final pass started

    @classmethod
    async def open(cls, backend: RecognizerBackend, sample_rate_hz: int = 8000, *, call_id: str = "",
                   final_after_s: float = FINAL_AFTER_S) -> GreetingWords | None:
        """Start ``backend`` (the shared engine: loaded already in a server) and open an
        utterance; None (logged) when the recogniser fails to: the call is screened without words."""
        errors: tuple[type[Exception], ...] = getattr(backend, "errors", ())

        def report(exc: Exception) -> None:
            log.warning("[%s] screening's recogniser: %s", call_id, exc)

        try:
            await backend.start(sample_rate_hz, report)
            utt = await backend.open(sample_rate_hz, NO_HINTS)
        except errors as exc:
            log.warning("[%s] screening without words: the recogniser did not start: %s", call_id, exc)
            return None
        if utt is None:
            return None
        return cls(utt, errors, final_after_s=final_after_s, sample_rate_hz=sample_rate_hz, call_id=call_id)

    def read(self) -> str:
        """What the recogniser has heard so far (the final pass's text once it came)."""
        return self.text

    async def push(self, pcm: bytes) -> None:
        """The callee's audio (16-bit PCM), until the final pass starts."""
        if self._utt is None or self._finishing is not None or not pcm:
            return
        try:
            heard = await self._utt.push(pcm)
        except self._errors as exc:
            self._fail(exc)
            return
        self.pushed_s += len(pcm) / 2 / self.sample_rate_hz
        if heard is not None:
            self.text = heard

    def heard_quiet(self, quiet_s: float | None) -> None:
        """The detector's quiet since the callee last spoke (None before any speech): at
        ``final_after_s`` the final pass starts, once."""
        if (quiet_s is None or quiet_s < self.final_after_s or self._finishing is not None
                or self._utt is None):
            return
        self.final_at_s = self.pushed_s
        self._finishing = asyncio.create_task(self._finish(), name="greeting-final")

    async def _finish(self) -> None:
        assert self._utt is not None
        try:
            text, _ = await self._utt.finish()
        except self._errors as exc:
            self._fail(exc)
            return
        self._utt = None
        self.final = self.text = text

    def _fail(self, exc: Exception) -> None:
        log.warning("[%s] screening's recogniser failed, the detector goes on without words: %s",
                    self.call_id, exc)
        if self._utt is not None:
            self._utt.abort()
        self._utt = None

    async def aclose(self) -> None:
        """Stop listening: a final pass still running is cancelled, an open utterance dropped."""
        task, self._finishing = self._finishing, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])          # our own cancellation still propagates
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        if self._utt is not None:
            self._utt.abort()
            self._utt = None
