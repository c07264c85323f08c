"""The recogniser's final pass in a worker process: its encoder and beam search off the server's
GIL.

The final pass (``ssm_engine.stt.final_pass``) encodes each utterance with Whisper's encoder and
runs the beam search over it, or Whisper's own decoder reads it (``whisper_final``): tens of
milliseconds of CPU per utterance, much of it under Python's GIL. In a thread of the server
process it competed with the event loop of every call; here it has a process (and a GIL) of its
own, as the stream's model has (``runner_procs``).

    proc = FinalPassProcess(["models/stt/final", "models/stt/lm.arpa.gz", "", "joint", "{}", "",
                             "whisper"])
    proc.start()                                  # the child loads the model and the LM
    proc.piece(uid, audio, hints=hints)           # a piece while the caller speaks (no reply)
    fut = proc.last(uid, rest)                    # -> Future of the final (Recognition | None)
    fut = proc.whole(audio, hints, uid=uid, spec=1)   # an early final: the utterance so far, fresh
    proc.want(uid, 1)                             # ... the turn waits for it: it runs next
    proc.forget(uid, 1)                           # ... or it is stale: it never runs
    proc.drop(uid)                                # an aborted utterance
    proc.stop()

The child decodes requests one at a time, in arrival order, so an utterance's pieces run in
order, with two exceptions for early finals, which many calls may have queued at once: one
wanted runs before anything not yet begun (wanted ones in the order they were asked), and one
forgotten before it began is answered null without running. An utterance's first piece carries
its hints. If the child dies, what it held is lost:
pending finals fail (``EngineUnavailableError``), and an utterance it had started gets no final
from the replacement (which never saw its first piece: its final is null), so the stream's final
stands; the replacement starts in the background (``child.ChildClient``).

Wire format (``framing`` frames): requests ``{"op": "piece" | "last" | "whole" | "drop" | "want" |
"forget", "uid": u, "spec": s (whole, want, forget), "id": r, "n": samples, "hints": {...}}`` with
float32 audio; replies ``{"id": r, "final":
{"text", "confidence", "alternatives", "hinted", "spotted"} | null}`` or ``{"id": r, "error":
cls, "message": m}``. The child's first reply is ``{"id": 0, "ok": load_s, "phone_vocab_size": p}``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import subprocess
import sys
from collections import OrderedDict, deque
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from pipeline.engines.child import ChildClient, ChildEnd
from pipeline.engines.framing import spawn_child
from pipeline.errors import EngineUnavailableError
from ssm_engine.stt.hints import Hints, Recognition

__all__ = ["FinalPassProcess", "decode_recognition", "encode_hints", "encode_recognition"]

logger = logging.getLogger(__name__)

_LOAD_TIMEOUT_S = 120.0
MAX_OPEN_UTTERANCES = 512
"""Utterances the child keeps (the oldest forgotten past it: one never finished nor dropped)."""


def encode_hints(hints: Hints) -> dict[str, Any]:
    d = dataclasses.asdict(hints)
    d["expect"] = sorted(d["expect"])
    return d


def decode_hints(d: dict[str, Any]) -> Hints:
    return Hints(expect=frozenset(d.get("expect", ())), phrases=tuple(d.get("phrases", ())),
                 keywords=tuple(d.get("keywords", ())), bonus=float(d.get("bonus", 4.0)),
                 min_digits=int(d.get("min_digits", 0)))


def encode_recognition(rec: Recognition | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    return {"text": rec.text, "confidence": rec.confidence,
            "alternatives": [[t, s] for t, s in rec.alternatives], "hinted": rec.hinted,
            "spotted": [[k, s] for k, s in rec.spotted]}


def decode_recognition(d: dict[str, Any] | None) -> Recognition | None:
    if d is None:
        return None
    return Recognition(d["text"], d["confidence"],
                       alternatives=tuple((str(t), float(s)) for t, s in d["alternatives"]),
                       hinted=bool(d["hinted"]),
                       spotted=tuple((str(k), float(s)) for k, s in d["spotted"]))


class FinalPassProcess(ChildClient):
    """The final pass's model and search in a child process (see the module docstring).
    ``args``: the final model's folder, the LM's path, the lexicon's path ("" for none), the
    search's kind ("joint", "phones", or "greedy": no search), the BeamConfig's fields as JSON,
    the free-recognition JointConfig's ("": the defaults) and, optionally, the finals' decoder
    ("whisper": Whisper's own, ``whisper_final``; "ctc", the default: the final model's heads)."""

    unavailable = EngineUnavailableError
    closed_word = "stopped"

    def __init__(self, args: list[str], *, name: str = "ssm-stt-final") -> None:
        super().__init__(args)
        self.name = name
        self.label = f"{name} process"
        self.phone_vocab_size = 0

    def start(self) -> None:
        self._start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self.close(timeout_s)

    def piece(self, uid: int, audio: np.ndarray, *, hints: Hints | None = None) -> None:
        """A piece of utterance ``uid`` (its first carries ``hints``); no reply. Dropped if the
        child is not there (the utterance's ``last`` is then refused)."""
        head: dict[str, Any] = {"op": "piece", "uid": uid, "n": int(audio.size)}
        if hints is not None:
            head["hints"] = encode_hints(hints)
        with self._lock:
            if self._sock is None:
                return
            try:
                self._send(head, _pcm(audio))
            except EngineUnavailableError:
                pass   # the reader thread reports its death

    def last(self, uid: int, audio: np.ndarray, *, hints: Hints | None = None) -> Future:
        """The utterance's last piece -> a Future of its final (None: no piece held audio)."""
        head: dict[str, Any] = {"op": "last", "uid": uid, "n": int(audio.size)}
        if hints is not None:
            head["hints"] = encode_hints(hints)
        return self._request(head, _pcm(audio), "final")

    def whole(self, audio: np.ndarray, hints: Hints, *, uid: int = 0, spec: int = 0) -> Future:
        """An utterance so far, decoded on fresh state (an early final) -> Future of the final.
        ``uid`` and ``spec`` (the utterance, and which of its early finals) name it for ``want``
        and ``forget``."""
        return self._request({"op": "whole", "uid": uid, "spec": spec, "n": int(audio.size),
                              "hints": encode_hints(hints)}, _pcm(audio), "final")

    def want(self, uid: int, spec: int) -> None:
        """A turn waits for that early final: the child runs it before anything not yet begun."""
        self._notify({"op": "want", "uid": uid, "spec": spec})

    def forget(self, uid: int, spec: int) -> None:
        """That early final is stale: if it has not begun, it never does (its answer is null)."""
        self._notify({"op": "forget", "uid": uid, "spec": spec})

    def drop(self, uid: int) -> None:
        self._notify({"op": "drop", "uid": uid})

    # -- ChildClient ----------------------------------------------------------------------------
    def _spawn(self) -> tuple[socket.socket, subprocess.Popen]:
        return spawn_child("pipeline.engines.final_procs", self._args)

    def _load_timeout_s(self) -> float:
        return _LOAD_TIMEOUT_S

    def _on_ready(self, head: dict) -> None:
        self.phone_vocab_size = int(head.get("phone_vocab_size", 0))

    def _deliver(self, fut: Future, kind: str, head: dict, payload: memoryview) -> None:
        fut.set_result(decode_recognition(head.get("final")))


def _pcm(audio: np.ndarray) -> bytes:
    return np.ascontiguousarray(audio, dtype=np.float32).tobytes()


# ---- the child ------------------------------------------------------------------------------


def _load(folder: str, lm_path: str, lexicon: str, kind: str, beam_json: str,  # noqa: ANN202
          joint_json: str = "", decoder: str = "ctc"):
    """The final model, its search and Whisper's decoder (None: CTC finals), as the server's
    engine builds them."""
    from pathlib import Path

    import torch

    from pipeline.engines.stt_loading import beam_search, load_final_model
    from ssm_engine.stt.beam import BeamConfig
    from ssm_engine.stt.joint import JointConfig

    model = load_final_model(Path(folder), torch.device("cpu"))
    beam = None
    if kind != "greedy":
        beam = beam_search(Path(lm_path), BeamConfig(**json.loads(beam_json)),
                            Path(lexicon) if lexicon else None,
                            "phones" if kind == "phones" else "joint",
                            JointConfig(**json.loads(joint_json)) if joint_json else None)
    whisper = None
    if decoder == "whisper":
        from pipeline.engines.whisper_final import shared_whisper_final
        whisper = shared_whisper_final()
    return model, beam, whisper


def _child_main(fd: int, args: list[str]) -> int:
    import time

    import torch

    from pipeline.engines.whisper_final import decode_whole_final, make_final_decoder

    end = ChildEnd(fd, engine="ssm-stt-final")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        model, beam, whisper = _load(*args)
    except Exception as exc:  # noqa: BLE001 - reported to the server, which raises it
        end.fail(0, exc)
        return 1
    end.ready(time.perf_counter() - t0, phone_vocab_size=model.config.phone_vocab_size)
    open_: OrderedDict[int, Any] = OrderedDict()   # a FinalPassDecoder or a WhisperFinalDecoder
    failed: set[int] = set()     # utterances whose piece failed: their final is None

    for head, payload in _scheduled(end):
        op, rid, uid = head.get("op"), head.get("id", 0), head.get("uid", 0)
        try:
            audio = np.frombuffer(payload, np.float32).copy() if payload else np.zeros(0, np.float32)
            if op == "drop":
                open_.pop(uid, None)
                failed.discard(uid)
                continue
            if op == "whole":
                whole = decode_whole_final(model, beam, decode_hints(head["hints"]), audio, whisper)
                end.send({"id": rid, "final": encode_recognition(whole)})
                continue
            if op not in ("piece", "last"):
                raise ValueError(f"unknown request {op!r}")
            dec = open_.get(uid)
            if dec is None and uid not in failed:
                if "hints" not in head:   # a later piece of an utterance this child never saw
                    logger.warning("utterance %d began in a final-pass process that has since "
                                   "died; its stream's final stands", uid)
                    failed.add(uid)
                else:
                    dec = open_[uid] = make_final_decoder(model, beam, decode_hints(head["hints"]),
                                                          whisper)
                    while len(open_) > MAX_OPEN_UTTERANCES:
                        open_.popitem(last=False)
            if dec is not None and uid not in failed:
                try:
                    dec.piece(audio)
                except Exception:  # our bug: this utterance's stream final stands
                    logger.exception("the final pass failed on a piece; the stream's final stands")
                    failed.add(uid)
                    open_.pop(uid, None)
                    dec = None
            if op == "last":
                open_.pop(uid, None)
                failed.discard(uid)
                rec = dec.result() if dec is not None else None
                end.send({"id": rid, "final": encode_recognition(rec)})
        except Exception as exc:  # noqa: BLE001 - answered: the server keeps the stream's final
            if rid:
                end.fail(rid, exc)
            else:
                logger.warning("dropped a request the server expects no reply to: %s", exc)
    return 0


def _scheduled(end: ChildEnd) -> Iterator[tuple[dict, memoryview]]:
    """The requests in the order to run them (the module docstring): as they arrived, but an
    early final asked for (``want``) before the rest, and one forgotten answered null, unrun."""
    urgent: deque[tuple[dict, memoryview]] = deque()
    queue: deque[tuple[dict, memoryview]] = deque()
    while True:
        got = end.arrived(wait=not (urgent or queue))
        if got is None:
            return
        for head, payload in got:
            op = head.get("op")
            if op not in ("want", "forget"):
                queue.append((head, payload))
                continue
            key = (head.get("uid"), head.get("spec"))
            for i, (h, p) in enumerate(queue):
                if h.get("op") == "whole" and (h.get("uid"), h.get("spec")) == key:
                    del queue[i]
                    if op == "want":
                        urgent.append((h, p))
                    else:
                        end.send({"id": h.get("id", 0), "final": None})
                    break
        if urgent or queue:
            yield (urgent or queue).popleft()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="ssm-stt-final %(levelname)s %(message)s")
    raise SystemExit(_child_main(int(sys.argv[1]), sys.argv[2:]))
