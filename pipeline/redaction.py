"""Masking what must not be kept: card and account numbers, US social security numbers, and the
slots an agent spec marks ``sensitive: true``, in call records, webhook bodies and logs.

    redactor = Redactor(sensitive_slots=frozenset({"account"}))
    redactor.text("card 4111 1111 1111 1111, ssn 123-45-6789")
        # -> "card **** **** **** 1111, ssn ***-**-6789"
    stored = redactor.record(record)          # a masked copy; the live record is left as it is
    store = RedactingCallStore(store, redactor)   # every write masked on its way in

What is masked:

- **Card and account numbers**: 12 to 19 digits that pass the Luhn check, written together
  (``4111111111111111``), in groups split by one space, dash or comma (``4111 1111-1111 1111``,
  an agent's read-back ``4 1 1 1, 1 1 1 1, ...``), or spoken as digit words (``four one one one
  ...``, what a recogniser writes). Each digit becomes ``*`` but the last four; separators stay,
  digit words become the masked digits.
- **Social security numbers**: ``AAA-GG-SSSS`` or ``AAA GG SSSS`` with a valid area (not 000,
  666 or 9xx), group (not 00) and serial (not 0000): ``***-**-6789``.
- **Sensitive slots**: their values wherever they appear in the record (the slot event, what
  the caller said, the agent's read-back, a tool call's arguments): a value of 8 digits or more
  keeps its last four; anything shorter (a PIN, a word) is masked whole.

The live record stays unmasked (the agent needs the number it was told); what is stored, sent
and logged is masked. Masking is idempotent and never adds a digit.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeline.records import CallRecord, CallStore

__all__ = ["Redactor", "RedactingCallStore", "luhn_valid", "mask_numbers"]

MIN_CARD_DIGITS, MAX_CARD_DIGITS = 12, 19
KEEP = 4
_STRICT_RUN = re.compile(r"(?<!\d)\d{%d,%d}(?!\d)" % (MIN_CARD_DIGITS, MAX_CARD_DIGITS))
_CHAIN = re.compile(r"(?<!\d)\d+(?:(?:, ?| |-)\d+)+(?!\d)")
_GROUP = re.compile(r"\d+")
_SSN = re.compile(r"(?<![\d-])(\d{3})([- ])(\d{2})\2(\d{4})(?![\d-])")
_WORD_DIGITS = {"zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                "six": "6", "seven": "7", "eight": "8", "nine": "9"}
_WORD = "(?:" + "|".join(_WORD_DIGITS) + ")"
_WORD_RUN = re.compile(rf"\b{_WORD}(?:[\s,-]+{_WORD})+\b", re.IGNORECASE)


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _mask_span(text: str, start: int, end: int, keep: int = KEEP) -> str:
    """Every digit of ``text[start:end]`` as ``*`` but the last ``keep``."""
    span = text[start:end]
    n_digits = sum(c.isdigit() for c in span)
    out, seen = [], 0
    for c in span:
        if c.isdigit():
            seen += 1
            out.append(c if seen > n_digits - keep else "*")
        else:
            out.append(c)
    return text[:start] + "".join(out) + text[end:]


def _is_card(digits: str) -> bool:
    return MIN_CARD_DIGITS <= len(digits) <= MAX_CARD_DIGITS and luhn_valid(digits)


def _mask_ssns(text: str) -> str:
    def one(m: re.Match) -> str:
        area, sep, group, serial = m.groups()
        if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
            return m.group(0)
        return f"***{sep}**{sep}{serial}"
    return _SSN.sub(one, text)


def _mask_chains(text: str, extra: tuple[str, ...]) -> str:
    """Grouped digits: the longest run of whole groups, left to right, that is a card number or
    holds a sensitive value's digits."""
    for chain in list(_CHAIN.finditer(text)):
        groups = [(g.start() + chain.start(), g.end() + chain.start()) for g in _GROUP.finditer(chain.group(0))]
        i = 0
        while i < len(groups):
            for j in range(len(groups) - 1, i - 1, -1):
                digits = "".join(text[s:e] for s, e in groups[i:j + 1])
                if _is_card(digits) or (j > i and any(v in digits for v in extra)):
                    text = _mask_span(text, groups[i][0], groups[j][1])
                    i = j
                    break
            i += 1
    return text


def _mask_words(text: str, extra: tuple[str, ...]) -> str:
    def one(m: re.Match) -> str:
        words = re.findall(_WORD, m.group(0), re.IGNORECASE)
        digits = "".join(_WORD_DIGITS[w.lower()] for w in words)
        if _is_card(digits) or any(v in digits for v in extra):
            return "*" * (len(digits) - KEEP) + digits[-KEEP:] if len(digits) >= 2 * KEEP else "*" * len(digits)
        return m.group(0)
    return _WORD_RUN.sub(one, text)


def mask_numbers(text: str, sensitive_digits: Iterable[str] = ()) -> str:
    """``text`` with card/account numbers and SSNs masked (the module docstring), and any digit
    sequence in ``sensitive_digits`` (at least 4 digits each) too."""
    extra = tuple(d for d in sensitive_digits if len(d) >= KEEP)
    if not any(c.isdigit() for c in text):
        return _mask_words(text, extra) if _WORD_RUN.search(text) else text
    for digits in extra:   # a sensitive value written together, inside any run
        for m in list(re.finditer(re.escape(digits), text)):
            text = _mask_span(text, m.start(), m.end(), KEEP if len(digits) >= 2 * KEEP else 0)
    text = _mask_chains(text, extra)   # before single runs: a group alone may pass the check too;
    text = _mask_ssns(text)            # and before SSNs: a card's last groups may read as one
    text = _STRICT_RUN.sub(lambda m: _mask_span(m.group(0), 0, len(m.group(0))) if _is_card(m.group(0))
                           else m.group(0), text)
    return _mask_words(text, extra)


@dataclass(frozen=True)
class Redactor:
    """Masks text and records; ``sensitive_slots``: the slot names whose values are masked too."""

    sensitive_slots: frozenset[str] = field(default_factory=frozenset)

    def text(self, text: str, values: Iterable[str] = ()) -> str:
        """``text`` masked; ``values``: sensitive values to mask besides the numbers."""
        values = [v for v in values if v]
        digit_values = [re.sub(r"\D", "", v) for v in values]
        text = mask_numbers(text, [d for d in digit_values if len(d) >= KEEP])
        for value, digits in zip(values, digit_values):
            if len(digits) < KEEP and value.strip():   # a word, a PIN: masked whole wherever it is
                text = re.sub(re.escape(value.strip()), lambda m: "*" * len(m.group(0)), text, flags=re.IGNORECASE)
        return text

    def value(self, value: str) -> str:
        """A sensitive slot's value: 8+ digits keep the last four, anything else masked whole."""
        digits = re.sub(r"\D", "", value)
        if len(digits) >= 2 * KEEP:
            return _mask_span(value, 0, len(value))
        return re.sub(r"\w", "*", value)

    def record(self, record: CallRecord) -> CallRecord:
        """A masked deep copy of ``record``."""
        out = copy.deepcopy(record)
        values = [str(e["data"].get("value", "")) for t in record.turns for e in t.events
                  if e.get("kind") == "slot" and isinstance(e.get("data"), dict)
                  and e["data"].get("name") in self.sensitive_slots]

        def walk(x: Any) -> Any:
            if isinstance(x, str):
                return self.text(x, values)
            if isinstance(x, list):
                return [walk(v) for v in x]
            if isinstance(x, dict):
                return {k: walk(v) for k, v in x.items()}
            return x

        out.greeting, out.greeting_heard = walk(out.greeting), walk(out.greeting_heard)
        out.params = walk(out.params)
        out.errors = walk(out.errors)
        def events(evs: list[dict]) -> list[dict]:
            for event in evs:
                data = event.get("data")
                if event.get("kind") == "slot" and isinstance(data, dict) and data.get("name") in self.sensitive_slots:
                    data["value"] = self.value(str(data.get("value", "")))
            return walk(evs)

        for turn in out.turns:
            turn.user_text, turn.agent_text = walk(turn.user_text), walk(turn.agent_text)
            turn.agent_text_heard = walk(turn.agent_text_heard)
            turn.tool_calls = walk(turn.tool_calls)
            turn.events = events(turn.events)
        out.greeting_events = events(out.greeting_events)
        return out


class RedactingCallStore:
    """A :class:`CallStore` that writes masked copies of the records to ``inner``."""

    def __init__(self, inner: CallStore, redactor: Redactor):
        self.inner = inner
        self.redactor = redactor

    def open(self, record: CallRecord) -> None:
        self.inner.open(self.redactor.record(record))

    def update(self, record: CallRecord) -> None:
        self.inner.update(self.redactor.record(record))

    def get(self, call_sid: str) -> CallRecord | None:
        return self.inner.get(call_sid)

    def list(self, *args: Any, **kwargs: Any) -> list[CallRecord]:
        return self.inner.list(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:   # close, close_orphans, the outbox: the inner store's
        return getattr(self.inner, name)
