"""``build_pipeline``: one call's pipecat pipeline, from transport in to transport out.

    transport.input()
      -> OnsetVADProcessor (Silero by default, webrtcvad optional) speech start/stop
      -> STT (streaming; finalizes the moment the VAD stops)       interim + final transcripts
      -> user aggregator (turn end: silence timer held longer on     LLMContextFrame, barge-in
                       unfinished words, or smart-turn)
      -> HeardContextProcessor                                      keeps only what was heard
      -> agent (embedded or any LLM service)                        reply text, streamed
      -> TTS (espeak-ng, or the SSM voice; phrase-by-phrase)          audio chunks as made
      -> transport.output()                                         paced audio, marks, clear
      -> assistant aggregator                                       the agent's side of the context

Two presets sit side by side so the benchmark can compare them in one run:
``PipelineConfig()`` is parley's (Silero, 200 ms silence timer, phrase flushing) and
``PipelineConfig.stock_pipecat()`` is pipecat's stock telephony set-up (Silero, smart-turn v3,
sentence aggregation).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import get_args

from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.observers.base_observer import BaseObserver
from pipecat.transports.base_transport import BaseTransport
from pipecat.turns.user_start import TranscriptionUserTurnStartStrategy, VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy, TurnAnalyzerUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from pipeline.errors import PipelineError
from pipeline.heard import HeardContextProcessor
from pipeline.recordings_s3 import RecordingsS3Config
from pipeline.options import (
    Aggregation,
    RecordingFormat,
    SttDecoder,
    SttKind,
    SttRunner,
    TtsKind,
    TurnKind,
    VadKind,
)

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class PipelineConfig:
    """How a call's pipeline is put together. Validates itself."""

    sample_rate_hz: int = 8000
    vad: VadKind = "silero"  # chosen by benchmarks/bench_vad.py: fewer false starts on noise
    vad_stop_s: float = 0.2  # the end-of-turn silence timer
    vad_start_s: float = 0.1
    turn: TurnKind = "hold"  # the silence timer, held longer on an unfinished transcript
    turn_hold_s: float = 0.45  # how much longer (pipeline/turn_end.py)
    stt: SttKind = "sphinx"
    tts: TtsKind = "espeak"
    text_aggregation: Aggregation = "phrase"
    allow_interruptions: bool = True
    tts_voice: str = "en-us"  # espeak-ng voice
    tts_model_dir: str | None = None  # the SSM voice's folder (None: the default voice's, models/tts-joe)
    # with stt="ssm": how finals are decoded, whether the model's 5-frame step is compiled
    # (torch.compile; ~3x less CPU a lone call, ~30 s at the first start), and where it runs
    stt_decoder: SttDecoder = "beam"
    stt_compile: bool = False
    stt_runner: SttRunner = "thread"
    stt_model_dir: str | None = None  # with stt="ssm": the recogniser's folder (None: models/stt)
    # with stt or tts "remote": the model servers (ws://HOST:PORT), tried in turn, failed over
    model_urls: tuple[str, ...] = ()
    remote_voice: str = ""  # with tts "remote": the servers' voice id (a shipped voice; "": their default)
    # where each call's two-channel recording is written (telephony.core.recorder); None: not recorded
    recordings_dir: str | None = None
    recording_format: RecordingFormat = "opus"   # Ogg/Opus, or "wav"
    # where each closed recording is then uploaded (telephony.core.uploads); None: kept on disk only
    recordings_s3: RecordingsS3Config | None = None

    def __post_init__(self):
        if self.sample_rate_hz not in (8000, 16000):
            raise PipelineError(f"sample_rate_hz must be 8000 or 16000, not {self.sample_rate_hz}")
        if not 0.0 <= self.turn_hold_s <= 3.0:
            raise PipelineError(f"turn_hold_s {self.turn_hold_s} is outside 0..3 s")
        if not 0.05 <= self.vad_stop_s <= 3.0:
            raise PipelineError(f"vad_stop_s {self.vad_stop_s} is outside 0.05..3.0 s")
        for name, value, allowed in (
            ("vad", self.vad, get_args(VadKind)),
            ("turn", self.turn, get_args(TurnKind)),
            ("stt", self.stt, get_args(SttKind)),
            ("tts", self.tts, get_args(TtsKind)),
            ("text_aggregation", self.text_aggregation, get_args(Aggregation)),
            ("stt_decoder", self.stt_decoder, get_args(SttDecoder)),
            ("stt_runner", self.stt_runner, get_args(SttRunner)),
            ("recording_format", self.recording_format, get_args(RecordingFormat)),
        ):
            if value not in allowed:
                raise PipelineError(f"{name} must be one of {allowed}, not {value!r}")
        if self.recordings_s3 is not None and self.recordings_dir is None:
            raise PipelineError("recordings_s3 needs recordings_dir: a recording is written to disk first")
        if "remote" in (self.stt, self.tts):
            from pipeline.engines.replicas import Replicas

            Replicas(self.model_urls)   # checks them: none, or not ws://HOST:PORT, is a start-up error
        if self.tts == "ssm":  # a missing voice is a start-up error, not a failure mid-call
            from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, check_voice_dir

            check_voice_dir(self.tts_model_dir or DEFAULT_MODEL_DIR)

    @classmethod
    def stock_pipecat(cls, **overrides) -> "PipelineConfig":
        """pipecat's stock telephony configuration, the baseline parley is measured against."""
        stock = cls(vad="silero", vad_start_s=0.2, turn="smart-turn", text_aggregation="sentence")
        return replace(stock, **overrides)


def _make_vad(config: PipelineConfig):
    from pipeline.vad import OnsetVADProcessor, make_vad_analyzer

    analyzer = make_vad_analyzer(
        config.vad,
        sample_rate_hz=config.sample_rate_hz,
        params=VADParams(start_secs=config.vad_start_s, stop_secs=config.vad_stop_s),
    )
    return OnsetVADProcessor(vad_analyzer=analyzer)


def _make_turn_stop(config: PipelineConfig):
    if config.turn == "smart-turn":
        from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

        return [TurnAnalyzerUserTurnStopStrategy(turn_analyzer=LocalSmartTurnAnalyzerV3())]
    if config.turn == "hold":   # the timer, and hold_s more when the words so far are unfinished
        from pipeline.turn_end import HoldUnfinishedTurnStopStrategy

        return [HoldUnfinishedTurnStopStrategy(hold_s=config.turn_hold_s)]
    # The VAD's stop_secs is the silence timer; nothing waits after it but the final transcript.
    return [SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.0)]


def _make_stt(config: PipelineConfig) -> FrameProcessor:
    # the caller's audio goes on past the recognizer only for smart-turn, whose turn-stop
    # strategy (in the user aggregator) listens to it; otherwise nothing downstream uses it
    passthrough = config.turn == "smart-turn"
    if config.stt == "ssm":  # parley's own recognizer (models/stt), all calls through one batcher
        from pipeline.services.ssm_stt import SSMSTTService

        from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR

        return SSMSTTService(sample_rate=config.sample_rate_hz, ttfs_p99_latency=0.5,
                             model_dir=config.stt_model_dir or DEFAULT_MODEL_DIR,
                             decoder=config.stt_decoder, compile=config.stt_compile,
                             runner=config.stt_runner, audio_passthrough=passthrough)
    if config.stt == "remote":  # the same recogniser on the model tier, shared by the process's calls
        from pipeline.engines.remote_recognizer import RemoteRecognizerEngine
        from pipeline.services.ssm_stt import SSMSTTService

        return SSMSTTService(engine=RemoteRecognizerEngine.shared(config.model_urls), sample_rate=config.sample_rate_hz,
                             ttfs_p99_latency=0.5, audio_passthrough=passthrough)
    if config.stt == "whisper":  # accurate, not streaming: finals ~0.5-1 s after the stop
        from pipeline.services.whisper_stt import WhisperSTTService

        return WhisperSTTService(sample_rate=config.sample_rate_hz, audio_passthrough=passthrough)
    from pipeline.services.sphinx_stt import SphinxSTTService

    # finalized transcripts end the turn at once; the p99 only bounds the wait when one is late
    return SphinxSTTService(sample_rate=config.sample_rate_hz, ttfs_p99_latency=0.5,
                            audio_passthrough=passthrough)


def _make_tts(config: PipelineConfig) -> FrameProcessor:
    if config.tts == "ssm":  # parley's own voice (models/tts-joe unless named), all calls through one voice thread
        from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR
        from pipeline.services.ssm_tts import SSMTTSService

        return SSMTTSService(
            model_dir=config.tts_model_dir or DEFAULT_MODEL_DIR,
            sample_rate=config.sample_rate_hz,
            aggregation=config.text_aggregation,
        )
    if config.tts == "remote":  # the same voice on the model tier, shared by the process's calls
        from pipeline.engines.remote_voice import RemoteVoiceEngine
        from pipeline.services.ssm_tts import SSMTTSService

        return SSMTTSService(engine=RemoteVoiceEngine.shared(config.model_urls, config.remote_voice),
                             sample_rate=config.sample_rate_hz,
                             aggregation=config.text_aggregation)
    from pipeline.services.espeak_tts import EspeakTTSService

    return EspeakTTSService(
        voice=config.tts_voice,
        sample_rate=config.sample_rate_hz,
        aggregation=config.text_aggregation,
    )


@dataclass
class CallPipeline:
    """What ``build_pipeline`` hands back: the worker to run and the parts a caller may inspect."""

    worker: PipelineWorker
    pipeline: Pipeline
    context: LLMContext
    stt: FrameProcessor
    tts: FrameProcessor


def build_pipeline(
    transport: BaseTransport,
    agent: FrameProcessor,
    config: PipelineConfig | None = None,
    *,
    observers: list[BaseObserver] | None = None,
    context: LLMContext | None = None,
    stt: FrameProcessor | None = None,
    tts: FrameProcessor | None = None,
    idle_timeout_s: float | None = 300.0,
) -> CallPipeline:
    """Assemble one call's pipeline and its worker (RTVI off: this is telephony)."""
    config = config or PipelineConfig()
    context = context or LLMContext()
    stt = stt or _make_stt(config)
    tts = tts or _make_tts(config)
    aggregators = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            user_turn_strategies=UserTurnStrategies(
                start=[
                    VADUserTurnStartStrategy(enable_interruptions=config.allow_interruptions),
                    TranscriptionUserTurnStartStrategy(enable_interruptions=config.allow_interruptions),
                ],
                stop=_make_turn_stop(config),
            ),
            user_turn_stop_timeout=5.0,
        ),
    )
    processors = [
        transport.input(),
        _make_vad(config),
        stt,
        aggregators.user(),
        HeardContextProcessor(),
        agent,
        tts,
        transport.output(),
        aggregators.assistant(),
    ]
    pipeline = Pipeline(processors)
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(
            audio_in_sample_rate=config.sample_rate_hz,
            audio_out_sample_rate=config.sample_rate_hz,
        ),
        enable_rtvi=False,
        observers=list(observers or []),
        idle_timeout_secs=idle_timeout_s,
        cancel_runner_on_idle_timeout=False,
    )
    return CallPipeline(worker=worker, pipeline=pipeline, context=context, stt=stt, tts=tts)
