"""ssm_engine.stt: a streaming character-CTC speech recogniser built on SSMStack.

    from ssm_engine.stt import load_stt, RecognizerStream
    model = load_stt("models/stt")                 # STTModel (StreamingModel: init_state/step)
    runner = BatchRunner(model); runner.start()
    rs = RecognizerStream(runner, model.config)    # one utterance
    rs.take(rs.push(pcm_8k).result()); rs.take(rs.finish().result()); rs.text

Modules: text (normalisation, vocabulary), frontend (causal log-mel + conv subsampling), model
(STTConfig, STTModel, save/load), decode (greedy CTC, CER/WER), stream (RecognizerStream),
train (``parley train stt``), export (shipped model + card), cli (register_cli), errors.
"""

from .decode import StreamingGreedyDecoder, cer, greedy_decode, wer
from .errors import AudioInputError, STTError, TranscriptError
from .model import STTConfig, STTModel, STTState, load_stt, prepare_audio, save_stt
from .stream import RecognizerStream
from .text import VOCAB, normalize_text

__all__ = [
    "STTConfig", "STTModel", "STTState", "load_stt", "save_stt", "prepare_audio",
    "RecognizerStream", "StreamingGreedyDecoder", "greedy_decode", "cer", "wer",
    "normalize_text", "VOCAB", "STTError", "AudioInputError", "TranscriptError",
]
