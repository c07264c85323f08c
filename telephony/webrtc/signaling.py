"""The signaling wire format of pipecat's SmallWebRTC, typed at the edge.

``POST /api/offer`` carries an :class:`Offer` and is answered with an :class:`Answer`;
``PATCH /api/offer`` carries a :class:`CandidatePatch` (trickled ICE candidates). These are the
bodies pipecat's own clients send, so any SmallWebRTC client can call parley::

    {"sdp": "v=0...", "type": "offer", "pc_id": null, "restart_pc": false}
    {"pc_id": "...", "candidates": [{"candidate": "candidate:...", "sdp_mid": "0", "sdp_mline_index": 0}]}

Anything else raises :class:`SignalingError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, overload

from telephony.webrtc.errors import SignalingError

MAX_SDP_CHARS = 32_000
MAX_CANDIDATES = 64
MAX_CANDIDATE_CHARS = 512


def _object(raw: bytes | str | dict) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SignalingError(f"body is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise SignalingError(f"body must be a JSON object, not {type(obj).__name__}")
    return obj


def _field(obj: dict, name: str, kind: type | tuple[type, ...], *, required: bool = True,
           default: Any = None) -> Any:
    if name not in obj or obj[name] is None:
        if required:
            raise SignalingError(f"missing field {name!r}")
        return default
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SignalingError(f"field {name!r} has the wrong type ({type(value).__name__})")
    return value


@overload
def _pc_id(value: str) -> str: ...
@overload
def _pc_id(value: None) -> None: ...
@overload
def _pc_id(value: str | None) -> str | None: ...
def _pc_id(value: str | None) -> str | None:
    if value is not None and not (0 < len(value) <= 128 and value.isprintable()):
        raise SignalingError("pc_id must be 1..128 printable characters")
    return value


@dataclass(frozen=True)
class Offer:
    sdp: str
    type: str = "offer"
    pc_id: str | None = None
    restart_pc: bool = False

    @classmethod
    def parse(cls, raw: bytes | str | dict) -> "Offer":
        obj = _object(raw)
        sdp = _field(obj, "sdp", str)
        kind = _field(obj, "type", str)
        if kind != "offer":
            raise SignalingError(f"type must be 'offer', not {kind[:20]!r}")
        if not sdp.startswith("v=0") or len(sdp) > MAX_SDP_CHARS:
            raise SignalingError(f"sdp must start with 'v=0' and hold at most {MAX_SDP_CHARS} characters")
        if "\nm=audio " not in sdp:
            raise SignalingError("the offer has no audio (no 'm=audio' line)")
        return cls(
            sdp=sdp,
            type=kind,
            pc_id=_pc_id(_field(obj, "pc_id", str, required=False)),
            restart_pc=_field(obj, "restart_pc", bool, required=False, default=False),
        )

    def to_dict(self) -> dict:
        return {"sdp": self.sdp, "type": self.type, "pc_id": self.pc_id, "restart_pc": self.restart_pc}


@dataclass(frozen=True)
class Answer:
    sdp: str
    pc_id: str
    type: str = "answer"

    @classmethod
    def parse(cls, raw: bytes | str | dict) -> "Answer":
        obj = _object(raw)
        kind = _field(obj, "type", str)
        if kind != "answer":
            raise SignalingError(f"type must be 'answer', not {kind[:20]!r}")
        return cls(sdp=_field(obj, "sdp", str), pc_id=_pc_id(_field(obj, "pc_id", str)), type=kind)

    def to_dict(self) -> dict:
        return {"sdp": self.sdp, "type": self.type, "pc_id": self.pc_id}


@dataclass(frozen=True)
class Candidate:
    """One trickled candidate; an empty ``candidate`` is the end-of-candidates marker (RFC 8840)."""

    candidate: str
    sdp_mid: str | None = None
    sdp_mline_index: int | None = None

    @classmethod
    def parse(cls, obj: Any) -> "Candidate":
        if not isinstance(obj, dict):
            raise SignalingError("each candidate must be a JSON object")
        text = _field(obj, "candidate", str, required=False, default="")
        if len(text) > MAX_CANDIDATE_CHARS:
            raise SignalingError(f"candidate longer than {MAX_CANDIDATE_CHARS} characters")
        text = text.removeprefix("a=").removeprefix("candidate:")
        if text and len(text.split()) < 8:
            raise SignalingError("candidate has fewer than the 8 fields RFC 8839 requires")
        # pipecat's clients send snake_case; the browser's RTCIceCandidate.toJSON() is camelCase
        mid = obj.get("sdp_mid", obj.get("sdpMid"))
        index = obj.get("sdp_mline_index", obj.get("sdpMLineIndex"))
        if mid is not None and not isinstance(mid, str):
            raise SignalingError("sdp_mid must be a string")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
            raise SignalingError("sdp_mline_index must be a non-negative integer")
        return cls(candidate=text, sdp_mid=mid, sdp_mline_index=index)

    @property
    def end_of_candidates(self) -> bool:
        return not self.candidate

    @property
    def address(self) -> str | None:
        """The connection address (field 5), or ``None`` for the end-of-candidates marker."""
        return self.candidate.split()[4] if self.candidate else None


@dataclass(frozen=True)
class CandidatePatch:
    pc_id: str
    candidates: tuple[Candidate, ...]

    @classmethod
    def parse(cls, raw: bytes | str | dict) -> "CandidatePatch":
        obj = _object(raw)
        pc_id = _pc_id(_field(obj, "pc_id", str))
        items = _field(obj, "candidates", list)
        if len(items) > MAX_CANDIDATES:
            raise SignalingError(f"more than {MAX_CANDIDATES} candidates in one patch")
        return cls(pc_id=pc_id, candidates=tuple(Candidate.parse(c) for c in items))


_DIGEST_BYTES = {"sha-1": 20, "sha-224": 28, "sha-256": 32, "sha-384": 48, "sha-512": 64}
_HEX = frozenset("0123456789abcdefABCDEF")


def check_fingerprints(sdp: str) -> None:
    """A new call's offer must carry DTLS fingerprints that are well-formed (RFC 8122: a known
    hash and as many colon-separated hex bytes as it makes); else :class:`SignalingError`."""
    lines = [line.strip() for line in sdp.splitlines() if line.startswith("a=fingerprint:")]
    if not lines:
        raise SignalingError("the offer has no DTLS fingerprint (a=fingerprint)")
    for line in lines:
        algorithm, _, value = line.removeprefix("a=fingerprint:").partition(" ")
        size = _DIGEST_BYTES.get(algorithm.lower())
        octets = value.strip().split(":")
        if size is None or len(octets) != size or not all(len(o) == 2 and set(o) <= _HEX for o in octets):
            raise SignalingError(f"bad DTLS fingerprint {line[:100]!r}")

