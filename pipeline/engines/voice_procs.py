"""The SSM voice in a process of its own, so its model steps never share the server's GIL.

Every torch op of the voice's thread releases Python's GIL and takes it back; with the event
loop of 16 calls busy in the same process, each take waits its turn, and a step of ~200 small
ops falls behind real time although the CPU has room (16 calls: thousands of 20 ms slots with
no agent audio). ``VoiceProcess`` runs the same ``SSMVoiceEngine`` in a child process and offers
its interface, so ``VoiceUtterance`` and ``SSMTTSService`` work with either:

    voice = VoiceProcess("models/tts")          # starts the child, waits until the voice loads
    SSMVoiceEngine.register_shared("models/tts", voice)   # what SSMTTSService.start() finds
    utt = voice.open(8000)
    async for chunk in utt.speak("Your order ships on Tuesday."):
        play(chunk.pcm)
    voice.close()

Requests go to the child over a Unix socket, and the reply of each completes its future
(``child.ChildClient``: start-up, the reader thread, a dead child's replacement). Rate
conversion (16 -> 8 kHz) stays in this process, in ``VoiceUtterance.speak``. A cancelled
utterance is cancelled in the child too. If the child dies, every pending and later request
fails with ``EngineUnavailableError`` (the TTS service turns that into an ``ErrorFrame`` and
the call goes on) while a replacement starts in the background.

Wire format (``framing.pack`` bodies: a JSON head, then a payload): requests ``{"op": "req",
"id": n, "utt": u, "seed": s, "deadline": t, "text": str | null}`` and ``{"op": "cancel",
"utt": u}``; replies ``{"id": n, "chunks": [[samples, start_s, words], ...] | null}`` with the
chunks' float32 samples back to back as payload, or ``{"id": n, "error": cls, "message": m}``.
The child's first frame is ``{"id": 0, "ok": load_s, "rate": hz}`` or an error.
"""

from __future__ import annotations

import itertools
import logging
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import cast

import numpy as np

from pipeline.engines.child import ChildClient, ChildEnd
from pipeline.engines.framing import spawn_child
from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, VoiceUtterance, check_voice_dir
from pipeline.errors import AudioFormatError, ConfigError, EngineUnavailableError, PipelineError
from ssm_engine import SSMEngineError

logger = logging.getLogger(__name__)

_LOAD_TIMEOUT_S = 120.0


class _Chunk:
    """A chunk as the child made it: ``pcm`` float32 at the voice's rate, ``start_s``, ``words``."""

    __slots__ = ("pcm", "start_s", "words")

    def __init__(self, pcm: np.ndarray, start_s: float, words: tuple) -> None:
        self.pcm, self.start_s, self.words = pcm, start_s, words


def _reply(chunks: list | None) -> tuple[dict, bytes]:
    """The child's reply to a request: the chunks' layout as the head, their samples after."""
    if chunks is None:
        return {"chunks": None}, b""
    head = {"chunks": [[len(c.pcm), c.start_s, [list(w) for w in c.words]] for c in chunks]}
    return head, b"".join(np.asarray(c.pcm, np.float32).tobytes() for c in chunks)


def _decode_chunks(head: dict, payload: memoryview) -> list[_Chunk] | None:
    if head.get("chunks") is None:
        return None
    pcm = np.frombuffer(payload, np.float32)
    chunks, at = [], 0
    for samples, start_s, words in head["chunks"]:
        chunks.append(_Chunk(pcm[at:at + samples], start_s, tuple((w, t) for w, t in words)))
        at += samples
    return chunks


class VoiceProcess(ChildClient):
    """``SSMVoiceEngine``'s ``open``/``request``/``close`` over a child process (see the module
    docstring). Blocks in ``__init__`` until the voice has loaded (``EngineUnavailableError``
    if it cannot: the child's reason is in the message)."""

    label = "the SSM voice process"
    unavailable = EngineUnavailableError
    voice_name = "the SSM voice"     # the speaking contract (pipeline.engines.speaking.Voice)
    errors: tuple[type[Exception], ...] = (SSMEngineError, PipelineError)
    written_words = False            # its words are the ones it spoke

    def __init__(self, model_dir: str | Path = DEFAULT_MODEL_DIR, *, lead_chunks: int = 5,
                 max_batch: int = 32, compile: bool = False) -> None:
        """``compile``: the child compiles a lone utterance's steps before it says it is ready
        (``SSMVoiceEngine``'s ``compile``; a replacement child compiles again, in seconds from
        the compile cache)."""
        if lead_chunks < 1 or max_batch < 1:  # as SSMVoiceEngine checks, before any child starts
            raise ConfigError(f"lead_chunks and max_batch must be >= 1, got {lead_chunks}, "
                             f"{max_batch}")
        self.model_dir = check_voice_dir(model_dir)
        super().__init__([str(self.model_dir), str(lead_chunks), str(max_batch), str(int(compile))])
        self._utt_ids = itertools.count(1)
        self.sample_rate_hz = 0
        self._start()

    # -- SSMVoiceEngine's interface -----------------------------------------------------------
    def open(self, sample_rate_hz: int, *, seed: int = 0) -> VoiceUtterance:
        if sample_rate_hz <= 0:
            raise AudioFormatError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
        utt = VoiceUtterance(self, sample_rate_hz, seed=seed)
        utt._remote_id = next(self._utt_ids)
        return utt

    def request(self, utt: VoiceUtterance, deadline_s: float, text: str | None = None) -> Future:
        return self._request({"op": "req", "utt": utt._remote_id, "seed": utt._seed,
                              "deadline": deadline_s, "text": text})

    def _on_cancel(self, utt: VoiceUtterance) -> None:
        """``utt.cancel()``: stop its steps in the child too."""
        self._notify({"op": "cancel", "utt": utt._remote_id})

    # -- ChildClient ----------------------------------------------------------------------------
    def _spawn(self) -> tuple[socket.socket, subprocess.Popen]:
        return spawn_child("pipeline.engines.voice_procs", self._args)

    def _load_timeout_s(self) -> float:
        return _LOAD_TIMEOUT_S

    def _on_ready(self, head: dict) -> None:
        self.sample_rate_hz = int(head["rate"])

    def _deliver(self, fut: Future, kind: str, head: dict, payload: memoryview) -> None:
        fut.set_result(_decode_chunks(head, payload))

    def _error(self, head: dict) -> Exception:
        cls = {"AudioFormatError": AudioFormatError,
               "EngineUnavailableError": EngineUnavailableError}.get(head["error"], PipelineError)
        return cls(head["message"])


# ---- the child ------------------------------------------------------------------------------


def _child_main(fd: int, model_dir: str, lead_chunks: int, max_batch: int, compile: bool) -> int:
    import time

    import torch

    from pipeline.engines.ssm_voice import SSMVoiceEngine

    end = ChildEnd(fd, engine="ssm-voice")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        engine = SSMVoiceEngine(model_dir, lead_chunks=lead_chunks, max_batch=max_batch,
                                compile=compile)
    except PipelineError as exc:
        end.fail(0, exc)
        return 1
    end.ready(time.perf_counter() - t0, rate=engine.sample_rate_hz)
    utts: dict[int, VoiceUtterance] = {}

    def encoder(uid: int) -> Callable[[object], tuple[dict, bytes]]:
        def encode(chunks: object) -> tuple[dict, bytes]:
            if chunks is None:  # the utterance is done
                utts.pop(uid, None)
            return _reply(cast("list | None", chunks))
        return encode

    for msg, _ in end.requests():
        if msg.get("op") == "cancel":
            utt = utts.pop(msg["utt"], None)
            if utt is not None:
                utt.cancel()
            continue
        rid, uid = msg["id"], msg["utt"]
        utt = utts.get(uid)
        if utt is None:
            utt = utts[uid] = engine.open(engine.sample_rate_hz, seed=int(msg.get("seed", 0)))
        try:
            fut = engine.request(utt, float(msg["deadline"]), msg.get("text"))
        except PipelineError as exc:
            end.fail(rid, exc)
            continue
        end.answer(rid, fut, encoder(uid))
    engine.close()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="ssm-voice %(levelname)s %(message)s")
    raise SystemExit(_child_main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                 int(sys.argv[4]), sys.argv[5] == "1"))
