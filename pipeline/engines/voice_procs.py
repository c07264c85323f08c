"""The SSM voice in a process of its own, so its model steps never share the server's GIL.

Every torch op of the voice's thread releases Python's GIL and takes it back; with the event
loop of 16 calls busy in the same process, each take waits its turn, and a step of ~200 small
ops falls behind real time although the CPU has room (16 calls: thousands of 20 ms slots with
no agent audio). ``VoiceProcess`` runs the same ``SSMVoiceEngine`` in a child process and offers
its interface, so ``SSMUtterance`` and ``SSMTTSService`` work with either:

    voice = VoiceProcess("models/tts")          # starts the child, waits until the voice loads
    SSMVoiceEngine.register_shared("models/tts", voice)   # what SSMTTSService.start() finds
    utt = voice.open(8000)
    async for chunk in utt.speak("Your order ships on Tuesday."):
        play(chunk.pcm)
    voice.close()

Requests go to the child over a Unix socket; one reader thread here completes their futures.
Rate conversion (16 -> 8 kHz) stays in this process, in ``SSMUtterance.speak``. A cancelled
utterance is cancelled in the child too. If the child dies, every pending and later request
fails with ``EngineUnavailableError`` (the TTS service turns that into an ``ErrorFrame`` and
the call goes on) while a replacement starts in the background.

Wire format: frames of a 4-byte big-endian length and a body. Requests are JSON:
``{"op": "req", "id": n, "utt": u, "seed": s, "deadline": t, "text": str | null}`` and
``{"op": "cancel", "utt": u}``. Replies are a 4-byte JSON length, JSON ``{"id": n, "chunks":
[[samples, start_s, words], ...] | null}`` or ``{"id": n, "error": cls, "message": m}``, then
the chunks' float32 samples back to back. The child's first frame is ``{"ready": load_s,
"rate": hz}`` or an error.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from pipeline.engines.framing import (
    ignore_stop_signals,
    pack,
    recv_frame,
    send_frame,
    spawn_child,
    unpack,
)
from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, SSMUtterance, check_voice_dir
from pipeline.errors import AudioFormatError, EngineUnavailableError, PipelineError

logger = logging.getLogger(__name__)

_LOAD_TIMEOUT_S = 120.0


class _Chunk:
    """A chunk as the child made it: ``pcm`` float32 at the voice's rate, ``start_s``, ``words``."""

    __slots__ = ("pcm", "start_s", "words")

    def __init__(self, pcm: np.ndarray, start_s: float, words: tuple) -> None:
        self.pcm, self.start_s, self.words = pcm, start_s, words


def _encode_reply(rid: int, chunks: list | None) -> bytes:
    if chunks is None:
        return pack({"id": rid, "chunks": None})
    head = {"id": rid, "chunks": [[len(c.pcm), c.start_s, [list(w) for w in c.words]]
                                  for c in chunks]}
    return pack(head, b"".join(np.asarray(c.pcm, np.float32).tobytes() for c in chunks))


def _decode_reply(body: bytes) -> tuple[dict, list[_Chunk] | None]:
    head, payload = unpack(body)
    if head.get("chunks") is None:
        return head, None
    pcm = np.frombuffer(payload, np.float32)
    chunks, at = [], 0
    for samples, start_s, words in head["chunks"]:
        chunks.append(_Chunk(pcm[at:at + samples], start_s, tuple((w, t) for w, t in words)))
        at += samples
    return head, chunks


class VoiceProcess:
    """``SSMVoiceEngine``'s ``open``/``request``/``close`` over a child process (see the module
    docstring). Blocks in ``__init__`` until the voice has loaded (``EngineUnavailableError``
    if it cannot: the child's reason is in the message)."""

    def __init__(self, model_dir: str | Path = DEFAULT_MODEL_DIR, *, lead_chunks: int = 5,
                 max_batch: int = 32) -> None:
        if lead_chunks < 1 or max_batch < 1:  # as SSMVoiceEngine checks, before any child starts
            raise ValueError(f"lead_chunks and max_batch must be >= 1, got {lead_chunks}, "
                             f"{max_batch}")
        self.model_dir = check_voice_dir(model_dir)
        self._args = [str(self.model_dir), str(lead_chunks), str(max_batch)]
        self._ids = itertools.count(1)
        self._utt_ids = itertools.count(1)
        self._lock = threading.Lock()          # pending, sock and proc; one writer at a time
        self._pending: dict[int, Future] = {}
        self._closed = False
        self.restarts = 0
        self._start()

    # -- SSMVoiceEngine's interface -----------------------------------------------------------
    def open(self, sample_rate_hz: int, *, seed: int = 0) -> SSMUtterance:
        if sample_rate_hz <= 0:
            raise AudioFormatError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
        utt = SSMUtterance(self, sample_rate_hz, seed=seed)
        utt._remote_id = next(self._utt_ids)
        return utt

    def request(self, utt: SSMUtterance, deadline_s: float, text: str | None = None) -> Future:
        fut: Future = Future()
        rid = next(self._ids)
        msg = {"op": "req", "id": rid, "utt": utt._remote_id, "seed": utt._seed,
               "deadline": deadline_s, "text": text}
        with self._lock:
            if self._closed:
                raise EngineUnavailableError("the SSM voice process is closed")
            if self._sock is None:
                raise EngineUnavailableError("the SSM voice process died and is restarting")
            self._pending[rid] = fut
            try:
                send_frame(self._sock, json.dumps(msg).encode())
            except OSError as exc:
                del self._pending[rid]
                raise EngineUnavailableError(f"the SSM voice process is gone ({exc})") from exc
        return fut

    def _on_cancel(self, utt: SSMUtterance) -> None:
        """``utt.cancel()``: stop its steps in the child too."""
        with self._lock:
            if self._sock is None:
                return
            try:
                send_frame(self._sock, json.dumps({"op": "cancel", "utt": utt._remote_id}).encode())
            except OSError:
                pass  # the reader thread sees the child's death and reports it

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
            proc = self._proc
        if sock is not None:
            # shutdown, not only close: the reader thread's recv() holds the socket open, so
            # close() alone sends no EOF and the child was killed after timeout_s
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()  # the child exits on EOF
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._reader.join(timeout_s)

    @property
    def workers_up(self) -> int:
        """1 while the child runs and answers, else 0 (dead, restarting or closed)."""
        with self._lock:
            return int(self._sock is not None and self._proc is not None and self._proc.poll() is None)

    @property
    def pid(self) -> int:
        return self._proc.pid

    # -- the child and its reader --------------------------------------------------------------
    def _start(self) -> None:
        mine, proc = spawn_child("pipeline.engines.voice_procs", self._args)
        try:
            mine.settimeout(_LOAD_TIMEOUT_S)
            head, _ = _decode_reply(recv_frame(mine))
            mine.settimeout(None)
        except (OSError, ValueError) as exc:
            mine.close()
            if isinstance(exc, TimeoutError):
                proc.kill()               # it hung
            try:
                proc.wait(timeout=5.0)    # reaped, with its exit code: no zombie
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise EngineUnavailableError(f"the SSM voice process did not start ({exc}; exit "
                                         f"code {proc.returncode})") from exc
        if "error" in head:
            mine.close()
            proc.wait()
            raise EngineUnavailableError(f"the SSM voice process failed: {head['message']}")
        self.load_s = float(head["ready"])
        self.sample_rate_hz = int(head["rate"])
        with self._lock:
            closed = self._closed
            if not closed:
                self._sock, self._proc = mine, proc
        if closed:  # close() came while this (replacement) child started: it goes too
            mine.close()
            proc.wait()
            raise EngineUnavailableError("the SSM voice process is closed")
        self._reader = threading.Thread(target=self._read, args=(mine, proc),
                                        name="ssm-voice-reader", daemon=True)
        self._reader.start()

    def _read(self, sock: socket.socket, proc: subprocess.Popen) -> None:
        while True:
            try:
                head, chunks = _decode_reply(recv_frame(sock))
            except (OSError, ValueError) as exc:
                self._lost(sock, proc, exc)
                return
            with self._lock:
                fut = self._pending.pop(head["id"], None)
            if fut is None or not fut.set_running_or_notify_cancel():
                continue  # the asker gave up (barge-in): nothing to deliver
            if "error" in head:
                cls = {"AudioFormatError": AudioFormatError,
                       "EngineUnavailableError": EngineUnavailableError}.get(head["error"],
                                                                             PipelineError)
                fut.set_exception(cls(head["message"]))
            else:
                fut.set_result(chunks)

    def _lost(self, sock: socket.socket, proc: subprocess.Popen, exc: Exception) -> None:
        with self._lock:
            closing = self._closed
            if self._sock is sock:
                self._sock = None
            pending, self._pending = self._pending, {}
        sock.close()
        if closing:
            for fut in pending.values():
                fut.cancel()
            return
        proc.wait()
        error = EngineUnavailableError(f"the SSM voice process (pid {proc.pid}) exited with code "
                                       f"{proc.returncode} ({exc})")
        logger.error("%s; %d request(s) failed; starting a new one", error, len(pending))
        for fut in pending.values():
            if fut.set_running_or_notify_cancel():
                fut.set_exception(error)
        try:
            self._start()
            self.restarts += 1
            logger.warning("the SSM voice process is back (pid %d, loaded in %.2f s)",
                           self._proc.pid, self.load_s)
        except EngineUnavailableError:
            if self._closed:
                return
            logger.error("the SSM voice process could not be restarted: calls go on without "
                         "the voice", exc_info=True)


# ---- the child ------------------------------------------------------------------------------


def _child_main(fd: int, model_dir: str, lead_chunks: int, max_batch: int) -> int:
    import time

    import torch

    from pipeline.engines.ssm_voice import SSMVoiceEngine

    ignore_stop_signals()
    torch.set_num_threads(1)
    sock = socket.socket(fileno=fd)
    write = threading.Lock()

    def send(body: bytes) -> None:
        with write:
            try:
                send_frame(sock, body)
            except OSError:
                pass  # the server is gone: the read loop below ends on EOF

    def error(rid: int, exc: BaseException) -> bytes:
        return pack({"id": rid, "error": type(exc).__name__, "message": str(exc)})

    t0 = time.perf_counter()
    try:
        engine = SSMVoiceEngine(model_dir, lead_chunks=lead_chunks, max_batch=max_batch)
    except PipelineError as exc:
        send(error(0, exc))
        return 1
    send(pack({"ready": time.perf_counter() - t0, "rate": engine.sample_rate_hz}))
    utts: dict[int, SSMUtterance] = {}

    def reply(rid: int, uid: int, fut: Future) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            send(error(rid, exc))
            return
        chunks = fut.result()
        if chunks is None:
            utts.pop(uid, None)
        send(_encode_reply(rid, chunks))

    while True:
        try:
            msg = json.loads(recv_frame(sock))
        except (OSError, ValueError):
            engine.close()
            return 0
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
            send(error(rid, exc))
            continue
        fut.add_done_callback(lambda f, rid=rid, uid=uid: reply(rid, uid, f))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="ssm-voice %(levelname)s %(message)s")
    raise SystemExit(_child_main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                 int(sys.argv[4])))
