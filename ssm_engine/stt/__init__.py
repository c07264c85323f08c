"""ssm_engine.stt: a streaming CTC speech recogniser (characters, optionally phones) on SSMStack.

    from ssm_engine.stt import load_stt, RecognizerStream
    model = load_stt("models/stt")                 # STTModel (StreamingModel: init_state/step)
    runner = BatchRunner(model); runner.start()
    rs = RecognizerStream(runner, model.config)    # one utterance
    rs.take(rs.push(pcm_8k).result()); rs.take(rs.finish().result()); rs.text

Modules: text (normalisation, vocabulary), phones (phone inventory, pronouncing dictionary),
frontend (causal log-mel + conv subsampling), model (STTConfig, STTModel, save/load), decode
(greedy CTC, CER/WER), lm (word n-gram LM), beam (character beam search + LM), phone_beam (phone
beam search into lexicon words), joint (both heads' n-best rescored together), stream
(RecognizerStream), train (``parley train stt``), export (shipped model + card), cli
(register_cli), errors.
"""

from .decode import StreamingGreedyDecoder, cer, greedy_decode, wer
from .beam import BeamConfig, CTCBeamSearch
from .errors import AudioInputError, STTError, TranscriptError
from .joint import JointConfig, JointSearch
from .model import STTConfig, STTModel, STTState, load_stt, prepare_audio, save_stt
from .phone_beam import PhoneBeamSearch
from .phones import PHONES, Pronouncer
from .stream import RecognizerStream
from .text import VOCAB, normalize_text

__all__ = [
    "STTConfig", "STTModel", "STTState", "load_stt", "save_stt", "prepare_audio",
    "RecognizerStream", "StreamingGreedyDecoder", "greedy_decode", "cer", "wer",
    "normalize_text", "VOCAB", "STTError", "AudioInputError", "TranscriptError",
    "BeamConfig", "CTCBeamSearch", "PhoneBeamSearch", "JointConfig", "JointSearch", "PHONES",
    "Pronouncer",
]
