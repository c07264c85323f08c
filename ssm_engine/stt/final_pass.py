"""One utterance's final pass, piece by piece: the synchronous core that a thread or a worker
process runs.

    dec = FinalPassDecoder(final_model, beam, hints)   # a model trained on whole utterances
    dec.piece(audio_8k)                 # each piece encoded whole; the SSM and the beam carry on
    dec.piece(rest)
    dec.result()                        # -> Recognition, or None when no piece held audio

``final_model`` is a ``WhisperSTTModel`` whose features are "utterance"
(``piece_log_probs``); ``beam`` the process's shared search (character, phone or joint), or None
for the greedy text. ``decode_whole`` decodes an utterance so far on fresh state (an early
final), leaving any piecewise decoder untouched.
"""

from __future__ import annotations

import numpy as np
import torch

from ..state import StackState
from .beam import CTCBeamSearch
from .decode import StreamingGreedyDecoder
from .encoder_model import WhisperSTTModel
from .hints import NO_HINTS, Hints, Recognition
from .joint import JointSearch
from .phone_beam import PhoneBeamSearch
from .stream import beam_columns, decode_utterance, search_result

__all__ = ["FinalPassDecoder", "decode_whole"]

Search = CTCBeamSearch | PhoneBeamSearch | JointSearch


class FinalPassDecoder:
    """See the module docstring. Not thread-safe: its pieces come one after another, in order."""

    def __init__(self, model: WhisperSTTModel, beam: Search | None, hints: Hints = NO_HINTS) -> None:
        self._model = model
        cfg = model.config
        self._vocab = cfg.vocab_size
        self._search = (beam.stream(hints) if isinstance(beam, JointSearch)
                        else beam.stream() if beam is not None else None)
        self._cols = beam_columns(beam, cfg)
        self._greedy = StreamingGreedyDecoder()
        self._state: StackState | None = None
        self.pieces = 0
        """Pieces that held audio, decoded so far."""

    def piece(self, audio: np.ndarray) -> None:
        """Encode one piece (float32 at the model's rate) and advance the searches over it."""
        if not audio.size:
            return
        lp, self._state = self._model.piece_log_probs(torch.from_numpy(audio)[None], self._state)
        lp = lp.cpu()
        self._greedy.push(lp[:, : self._vocab])
        if self._search is not None:
            self._search.push(lp[:, self._cols])
        self.pieces += 1

    def result(self) -> Recognition | None:
        """The final of the pieces so far (the search is finished: call it once, last)."""
        if not self.pieces:
            return None
        return search_result(self._search, self._greedy.text)


def decode_whole(model: WhisperSTTModel, beam: Search | None, hints: Hints,
                 audio: np.ndarray) -> Recognition:
    """An utterance so far, encoded whole on fresh state, with a fresh search."""
    lp = model.utterance_log_probs(torch.from_numpy(audio)[None]).cpu()
    return decode_utterance(lp, model.config, beam=beam, hints=hints)
