"""parley's streaming text-to-speech voice: text front end and teacher data (model to come).

    from ssm_engine.tts import phonemize, encode, IncrementalPhonemizer
    ids = encode(phonemize("Your order number is 4417."))   # (n, 3): symbol id, stress, position
"""

from .errors import LexiconError, TeacherError, TextError, TTSError
from .phonemes import SYMBOLS, IncrementalPhonemizer, PhoneToken, encode, phonemize
from .text import Word, normalize

__all__ = ["TTSError", "TextError", "LexiconError", "TeacherError", "PhoneToken", "SYMBOLS",
           "encode", "phonemize", "IncrementalPhonemizer", "Word", "normalize"]
