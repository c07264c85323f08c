"""A campaign's contacts file (CSV) and do-not-call list, checked whole before any call.

::

    to,timezone,first_name,account
    +15551230001,America/New_York,Ada,A-17
    sip:bob@10.0.0.5,Europe/London,Bob,B-2

``to`` is whom to call: a phone number in E.164 form (dialled through Twilio) or a ``sip:`` URI
(dialled by parley's own SIP user agent). ``timezone`` is an IANA zone name (the calling window
is in it); a file without the column, or a row with it empty, takes ``default_timezone`` when one
is given. Every other column is a parameter the agent gets with the call, as ``POST /calls``
``params`` are: its name 1-64 letters, digits, ``_`` or ``-``, its values at most 500 characters.

A file with any problem is refused whole (:class:`~telephony.errors.ContactsError`), each problem
on one line, ``FILE:LINE: what``: a missing column, a target that is neither E.164 nor ``sip:``, an
unknown time zone, a contact that appears twice, a bad parameter name or value.

The do-not-call list is a text file, one phone number or ``sip:`` URI a line, ``#`` comments.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from telephony.errors import ContactsError

__all__ = ["Contact", "load_dnc", "parse_contacts", "read_contacts", "valid_timezone"]

E164: Final = re.compile(r"\+[1-9][0-9]{6,14}")
SIP_URI: Final = re.compile(r"sips?:[^\s@]+@[^\s@]+|sips?:[^\s@]+")
PARAM_NAME: Final = re.compile(r"[A-Za-z0-9_\-]{1,64}")
MAX_PARAM_CHARS: Final = 500
MAX_PARAMS: Final = 20
TARGET, TIMEZONE = "to", "timezone"


@dataclass(frozen=True)
class Contact:
    line: int
    target: str
    timezone: str
    params: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """What makes two contacts the same: the target as dialled (a SIP URI's scheme in lower case)."""
        return normal_target(self.target)


def normal_target(text: str) -> str:
    text = text.strip()
    if text[:5].lower().startswith(("sip:", "sips:")):
        scheme, _, rest = text.partition(":")
        return f"{scheme.lower()}:{rest}"
    return text


def is_target(text: str) -> bool:
    return bool(E164.fullmatch(text) or SIP_URI.fullmatch(normal_target(text)))


def valid_timezone(name: str) -> bool:
    if not name or name.startswith(("/", ".")) or ".." in name:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def read_contacts(path: Path, *, default_timezone: str | None = None) -> list[Contact]:
    """The file's contacts, or ContactsError listing every problem (an unreadable file is one)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContactsError([f"{path}: cannot read the contacts: {exc}"]) from exc
    return parse_contacts(text, str(path), default_timezone=default_timezone)


def parse_contacts(text: str, name: str, *, default_timezone: str | None = None) -> list[Contact]:
    """Contacts from CSV ``text`` (``name`` is how problems name the file)."""
    problems: list[str] = []
    if default_timezone is not None and not valid_timezone(default_timezone):
        problems.append(f"{name}: the default time zone {default_timezone!r} is not a known zone (e.g. America/New_York)")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        raise ContactsError([f"{name}:1: the file is empty: a header line is needed ({TARGET},{TIMEZONE},...)"])
    header = [h.strip() for h in header]
    if TARGET not in header:
        problems.append(f"{name}:1: no column {TARGET!r} (whom to call: +15551234567 or sip:user@host)")
    if TIMEZONE not in header and default_timezone is None:
        problems.append(f"{name}:1: no column {TIMEZONE!r} (e.g. America/New_York), and no default time zone given")
    seen_names: set[str] = set()
    for column in header:
        if column in seen_names:
            problems.append(f"{name}:1: column {column!r} appears twice")
        seen_names.add(column)
        if column not in (TARGET, TIMEZONE) and not PARAM_NAME.fullmatch(column):
            problems.append(f"{name}:1: column {column[:70]!r}: a parameter's name is 1-64 letters, digits, "
                            "'_' or '-'")
    extra = [c for c in header if c not in (TARGET, TIMEZONE)]
    if len(extra) > MAX_PARAMS:
        problems.append(f"{name}:1: {len(extra)} parameter columns: at most {MAX_PARAMS}")
    if problems and TARGET not in header:
        raise ContactsError(problems)
    contacts: list[Contact] = []
    first_line: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        where = f"{name}:{line}"
        if len(row) != len(header):
            problems.append(f"{where}: {len(row)} fields, the header has {len(header)}")
            continue
        cells = dict(zip(header, (c.strip() for c in row)))
        target = normal_target(cells[TARGET])
        zone = cells.get(TIMEZONE) or default_timezone or ""
        bad = False
        if not is_target(target):
            problems.append(f"{where}: {target[:40]!r} is neither a phone number in E.164 form (+15551234567) "
                            "nor a sip: URI")
            bad = True
        if not valid_timezone(zone):
            problems.append(f"{where}: unknown time zone {zone[:60]!r} (an IANA name, e.g. America/New_York)"
                            if zone else f"{where}: no time zone (fill {TIMEZONE!r} or give a default)")
            bad = True
        params = {k: v for k, v in cells.items() if k not in (TARGET, TIMEZONE)}
        for key, value in params.items():
            if len(value) > MAX_PARAM_CHARS:
                problems.append(f"{where}: {key!r} is over {MAX_PARAM_CHARS} characters")
                bad = True
        if not bad and target in first_line:
            problems.append(f"{where}: {target} is a duplicate of line {first_line[target]}")
            bad = True
        if not bad:
            first_line[target] = line
            contacts.append(Contact(line, target, zone, params))
    if problems:
        raise ContactsError(problems)
    if not contacts:
        raise ContactsError([f"{name}: no contacts: the file has a header and nothing under it"])
    return contacts


def load_dnc(path: Path) -> frozenset[str]:
    """The do-not-call list: its targets (ContactsError for a line that is not one)."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ContactsError([f"{path}: cannot read the do-not-call list: {exc}"]) from exc
    problems, targets = [], set()
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        if not is_target(text):
            problems.append(f"{path}:{number}: {text[:40]!r} is neither a phone number in E.164 form nor a sip: URI")
        targets.add(normal_target(text))
    if problems:
        raise ContactsError(problems)
    return frozenset(targets)
