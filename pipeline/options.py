"""The pipeline's options, one ``Literal`` each: the one list of allowed values.

``PipelineConfig`` checks its fields against them, the services take them as types, and the
command lines offer them as choices (``typing.get_args``), so the three never disagree. This
module imports nothing heavy: ``parley serve --help`` reads it without loading an engine.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["Aggregation", "RecordingFormat", "SttDecoder", "SttKind", "SttRunner", "TtsKind", "TurnKind", "VadKind"]

VadKind = Literal["webrtc", "silero"]
TurnKind = Literal["silence", "hold", "smart-turn"]
SttKind = Literal["sphinx", "ssm", "whisper", "remote"]
TtsKind = Literal["espeak", "ssm", "remote"]
"""``remote``: the SSM model on the model tier (``parley model-server``, ``PipelineConfig.model_urls``)."""
Aggregation = Literal["phrase", "sentence"]
SttDecoder = Literal["beam", "greedy", "char-beam", "phone-beam"]
"""How the SSM recogniser decodes finals: ``beam``, beam search with the word LM (for a model
with a phone head and its lexicon, both heads' searches rescored together, ``JointSearch``;
else over characters); ``greedy`` CTC; ``char-beam`` and ``phone-beam``, one head's search
alone (baselines)."""
SttRunner = Literal["thread", "process"]
"""Where an engine steps the model: a thread of this process, or a child process (its own GIL)."""
RecordingFormat = Literal["opus", "wav"]
"""A call recording's file: Ogg/Opus (compact, the default) or 16-bit WAV (``pipeline.audio.recordings``)."""
