"""parley's streaming text-to-speech voice, distilled from festival's slt HTS voice.

    from ssm_engine.tts import TTSVoice
    voice = TTSVoice.load("models/tts")
    stream = voice.open_stream()
    stream.push_text("Your order number is 4417.")   # text as it arrives (LLM tokens)
    stream.end_text()
    for chunk in stream.iter_pull(): ...              # 20 ms AudioChunks, 16 kHz float32, words

Modules: text (normaliser), lexicon and lts (pronunciations), phonemes (PhoneToken, incremental
phonemizer), teacher/align/sentences/dataset (``parley data tts``), vocoder (features <-> audio),
model (TTSModel), synth (TTSVoice, TTSStream), train and export (``parley train tts``), errors.
"""

from .errors import LexiconError, TeacherError, TextError, TTSError
from .phonemes import SYMBOLS, IncrementalPhonemizer, PhoneToken, encode, phonemize
from .synth import AudioChunk, Synthesis, TTSStream, TTSVoice
from .text import Word, normalize

__all__ = ["TTSError", "TextError", "LexiconError", "TeacherError", "PhoneToken", "SYMBOLS",
           "encode", "phonemize", "IncrementalPhonemizer", "Word", "normalize", "TTSVoice",
           "TTSStream", "AudioChunk", "Synthesis"]
