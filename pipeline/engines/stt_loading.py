"""What the SSM recogniser loads beside its model: the beam search (LM, lexicon) and the final
pass's model. Shared by the engine (``ssm_recognizer``) and its final-pass worker
(``final_procs``), so both build the same search from the same files."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Literal

import torch

from pipeline.errors import EngineUnavailableError
from ssm_engine import SSMEngineError
from ssm_engine.stt.beam import BeamConfig, CTCBeamSearch
from ssm_engine.stt.encoder_model import WhisperSTTModel
from ssm_engine.stt.joint import JointConfig, JointSearch
from ssm_engine.stt.lm import NGramLM
from ssm_engine.stt.phone_beam import PhoneBeamSearch
from ssm_engine.stt.phones import Pronouncer
from ssm_engine.stt.recognizers import load_recognizer

__all__ = ["SEARCH_FILE", "beam_search", "load_final_model", "search_weights"]

SEARCH_FILE = "search.json"
"""Beside a final-pass model: the joint search's rescoring weights chosen for it on utterances
with no hints (``{"free": {"lm_weight": ..., ...}}``, ``JointConfig``'s fields; absent: the
defaults). Hinted turns keep the defaults, with which the agent's thresholds were set."""


@functools.lru_cache(maxsize=4)
def beam_search(lm_path: Path, config: BeamConfig, lexicon_path: Path | None = None,
                 kind: Literal["phones", "joint"] = "joint", free: JointConfig | None = None
                 ) -> CTCBeamSearch | PhoneBeamSearch | JointSearch:
    """One loaded LM + lexicon per file and settings for the process (read-only, shared): over
    characters, or with ``lexicon_path`` (pronunciations) over phones (``kind`` "phones") or
    both heads (``kind`` "joint"; ``free``: its rescoring weights for utterances with no hints)."""
    try:
        lm = NGramLM.load(lm_path)
    except SSMEngineError as exc:
        raise EngineUnavailableError(f"STT language model failed to load: {exc} (build it "
                                     f"with `parley train stt-lm`)") from exc
    if lexicon_path is None:
        return CTCBeamSearch(lm, config)
    try:
        lexicon = Pronouncer.load(lexicon_path, words=lm.vocab)
        if kind == "phones":
            return PhoneBeamSearch(lm, lexicon, config)
        search = JointSearch(lm, lexicon, config, free=free)
        search.warm_grammars()          # ~0.4 s here, rather than in a caller's first name turn
        return search
    except (SSMEngineError, ValueError, OSError) as exc:
        raise EngineUnavailableError(f"STT pronunciation lexicon {lexicon_path} failed to load: "
                                     f"{exc}") from exc


def load_final_model(final_dir: Path, target: torch.device) -> WhisperSTTModel:
    """The final pass's model (a recogniser trained on whole utterances) on ``target``."""
    try:
        final = load_recognizer(final_dir)
    except SSMEngineError as exc:
        raise EngineUnavailableError(f"SSM STT: the final-pass model failed to load: {exc}") from exc
    if not isinstance(final, WhisperSTTModel) or final.config.features != "utterance":
        raise EngineUnavailableError(f"SSM STT: {final_dir} is not a final-pass model (a "
                                     f"recogniser trained on whole utterances)")
    return final.eval().to(target)


def search_weights(model_dir: Path) -> JointConfig | None:
    """The free-recognition rescoring weights a model folder's ``SEARCH_FILE`` chose (None: no
    file)."""
    path = model_dir / SEARCH_FILE
    if not path.exists():
        return None
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))["free"]
        return dataclasses.replace(JointConfig(), **fields)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EngineUnavailableError(f"SSM STT: {path} is not a search file ({exc})") from exc
