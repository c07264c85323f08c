"""What the browser page sends over the data channel, typed at the edge.

    {"type": "hangup"}                   the caller hung up
    {"type": "dtmf", "digit": "1"}       a key of the page's keypad: 0-9, * or #

Pipecat's connection decodes the JSON (and keeps its ``ping`` keep-alives to itself);
:func:`parse_page_command` turns the object into a :class:`HangUp` or a :class:`KeyPress`, or
raises :class:`~telephony.webrtc.errors.PageMessageError` for anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from telephony.webrtc.errors import PageMessageError

__all__ = ["KEYPAD", "HangUp", "KeyPress", "PageCommand", "parse_page_command"]

KEYPAD: Final = "0123456789*#"


@dataclass(frozen=True, slots=True)
class HangUp:
    """The caller pressed "Hang up" (or left the page)."""


@dataclass(frozen=True, slots=True)
class KeyPress:
    """The caller pressed a key of the page's keypad."""

    digit: str

    def __post_init__(self) -> None:
        if self.digit not in KEYPAD or len(self.digit) != 1:
            raise PageMessageError(f"dtmf digit must be one of {KEYPAD}, not {self.digit[:8]!r}")


PageCommand: TypeAlias = HangUp | KeyPress


def parse_page_command(message: object) -> PageCommand:
    """The page's message as a command; raises ``PageMessageError`` when it is none we know."""
    if not isinstance(message, dict):
        raise PageMessageError(f"a page message must be a JSON object, not {type(message).__name__}")
    kind = message.get("type")
    if kind == "hangup":
        return HangUp()
    if kind == "dtmf":
        digit = message.get("digit")
        if not isinstance(digit, str):
            raise PageMessageError("a dtmf message needs a string 'digit'")
        return KeyPress(digit)
    raise PageMessageError(f"unknown page message type {str(kind)[:20]!r}")
