"""Text normalisation for phone talk: what an agent writes -> the words it says, with pauses.

    normalize("Your order #A12-345 ships May 3rd at 3:45 pm, Dr. Lee.")
    # -> words: your order number a one two , three four five ships may third at three forty
    #    five p m , doctor lee  (then an "end" marker)

The output is a list of ``Word(text, kind)``: ``kind`` is ``"word"`` (a lowercase word),
``"letter"`` (a spelled letter, said by its name: the letter "a" is "ey", not the article),
``"pau"`` (a comma or clause pause), ``"end"`` (sentence end) or ``"qend"`` (question end).

Text is cut at whitespace into chunks. A chunk's reading depends on the chunk itself, the raw
chunk before it, and, only when ``needs_right_context(chunk)`` says so, the raw chunk after it
("Dr." before a name, "$4" before "million", "555" before "123-4567"). That bounded context is
what makes :class:`IncrementalNormalizer` exact: a chunk is released once whitespace follows it
and, if it needs one, once the next chunk is complete too, so any split of the text gives the
same words as the whole text. Characters the normaliser cannot say (emoji, unknown symbols) are
dropped; text with nothing speakable normalises to ``[]`` (``phonemize`` raises ``TextError``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal, NamedTuple

from . import numbers as num

__all__ = ["Word", "Kind", "normalize", "needs_right_context", "expand_chunk",
           "IncrementalNormalizer"]

Kind = Literal["word", "letter", "pau", "end", "qend"]


class Word(NamedTuple):
    text: str
    kind: Kind = "word"


_TITLES = {"mr": "mister", "mrs": "missus", "ms": "miz", "prof": "professor"}
_ABBREV = {"jr": "junior", "sr": "senior", "ave": "avenue", "rd": "road", "blvd": "boulevard",
           "ln": "lane", "apt": "apartment", "ste": "suite", "vs": "versus", "etc": "et cetera",
           "approx": "approximately", "dept": "department", "inc": "incorporated",
           "ltd": "limited", "corp": "corporation", "ext": "extension", "mt": "mount",
           "hwy": "highway", "pkwy": "parkway", "acct": "account", "tel": "telephone",
           "qty": "quantity", "min": "minutes", "hrs": "hours", "hr": "hour", "sec": "seconds",
           "lbs": "pounds", "oz": "ounces", "kg": "kilograms", "km": "kilometers",
           "mph": "miles per hour", "ok": "okay"}
_DOT_ONLY = {"co": "company", "jan": "january", "feb": "february",
             "mar": "march", "apr": "april", "jun": "june", "jul": "july", "aug": "august",
             "sep": "september", "sept": "september", "oct": "october", "nov": "november",
             "dec": "december", "mon": "monday", "tue": "tuesday", "tues": "tuesday",
             "wed": "wednesday", "thu": "thursday", "thur": "thursday", "thurs": "thursday",
             "fri": "friday", "sat": "saturday", "sun": "sunday", "fig": "figure",
             "est": "estimated", "dr": "doctor", "st": "street"}
_DOTTED = {"e.g.": "for example", "i.e.": "that is", "a.m.": "a m", "p.m.": "p m",
           "u.s.": "u s", "etc.": "et cetera"}
_REAL_WORDS = {"sun", "sat", "wed", "mar", "jan", "mon", "fig", "co", "dec"}  # "I sat." is no day
_SPELL = {"id", "tv", "pc", "usa", "uk", "eu", "faq", "atm", "sms", "pdf", "url", "cd", "dvd",
          "ups", "vip", "ceo", "gps", "ssn", "dob", "it", "us", "hr", "pm", "am"}
_SCALES = {"thousand", "million", "billion", "trillion"}
_SCALE_SUFFIX = {"k": "thousand", "m": "million", "mm": "million", "bn": "billion", "b": "billion"}
_YEAR_PREV = {"in", "since", "of", "year", "until", "by", "from", "to", "before", "after",
              "during", "fiscal", "class"}
_SYMBOLS = {"&": "and", "@": "at", "+": "plus", "=": "equals", "/": "slash", "*": "star",
            "%": "percent", "°": "degrees"}
_MONTH_WORDS = set(num.MONTHS) | {k for k, v in _DOT_ONLY.items() if v in num.MONTHS}
_AMPM = r"(?:[ap]\.m\.|[ap]m)"

_PIECE = re.compile(r"""
    (?P<url>(?:https?://|www\.)[^\s]+?)(?=[.,;:!?]*$)
  | (?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)
  | (?P<money>[$€£])(?P<amount>\d[\d,]*(?:\.\d+)?|\.\d+)(?P<suffix>bn|mm|[kmb](?![a-z]))?
  | (?P<time>(?P<hh>\d{1,2}):(?P<mm>\d{2}))(?::\d{2})?(?P<ampm1>""" + _AMPM + r""")?
  | (?P<hour>\d{1,2})(?P<ampm2>""" + _AMPM + r""")
  | (?P<iso>(?P<iy>\d{4})-(?P<im>\d{2})-(?P<id>\d{2}))(?!\d)
  | (?P<slash>(?P<sm>\d{1,2})/(?P<sd>\d{1,2})(?:/(?P<sy>\d{4}|\d{2}))?)(?![\d/])
  | (?P<dashed>\(?\d+\)?(?:-\d+)+)
  | (?P<paren>\(\d+\))
  | (?P<ordinal>\d+)(?:st|nd|rd|th)(?![a-z])
  | (?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d*\.\d+|\d+)(?P<pct>%)?(?![a-z])
  | (?P<code>(?:[a-z]+\d[a-z\d]*|\d+[a-z][a-z\d]*)(?:-[a-z\d]+)*|[a-z]+-\d+(?:-[a-z\d]+)*)
  | (?P<dotted>(?:[a-z]\.){2,})
  | (?P<spelled>(?<![a-z])[a-z](?:-[a-z])+(?![a-z]))
  | (?P<word>[a-z]+(?:'[a-z]+)*'?)(?P<wdot>\.(?!\.))?
  | (?P<ellipsis>\.\.\.+|…)
  | (?P<end>[.!?]+)
  | (?P<pau>[,;:]|--+|[—–]|(?<![a-z\d])-(?![a-z\d]))
  | (?P<symbol>[&@#%+=/*°])
""", re.VERBOSE | re.IGNORECASE)
_KINDS = ("url", "email", "money", "time", "hour", "iso", "slash", "dashed", "paren", "ordinal",
          "number", "code", "dotted", "spelled", "word", "ellipsis", "end", "pau", "symbol")
_DIGITISH = re.compile(r"[(+]?\d[\d()-]*[,.;:]?")
_PURE_NUMBER = re.compile(r"\(?(\d+)\)?[,.;:!?]?")
_ABBREV_END = re.compile(r"(?:[a-z]\.){2,}|[a-z]+\.", re.IGNORECASE)


def _clean(chunk: str) -> str:
    """Unicode to plain ASCII where it has a plain form; curly quotes to straight ones."""
    chunk = chunk.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"')
    chunk = chunk.replace("\u201d", '"')
    decomposed = unicodedata.normalize("NFKD", chunk)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _bare(chunk: str | None) -> str:
    return "" if chunk is None else re.sub(r"[^\w$€£:'/.-]+$", "", _clean(chunk)).lower()


def _digit_count(chunk: str | None) -> int:
    if chunk is None or not _DIGITISH.fullmatch(_clean(chunk)):
        return 0
    return sum(c.isdigit() for c in chunk)


def needs_right_context(chunk: str) -> bool:
    """Whether the chunk's reading can depend on the chunk after it: a money amount (a scale word
    may follow), a number of 3+ digits (a digit group may follow), a word ending in a period
    (an abbreviation, or a sentence end before a capital), the letter a (a spelled letter when
    one follows), or "dr"/"st" without a period."""
    c = _clean(chunk)
    number = _PURE_NUMBER.fullmatch(c)
    if re.search(r"[$€£]\d", c) or number is not None and len(number.group(1)) >= 3:
        return True
    if _ABBREV_END.search(c) and c.endswith("."):
        return True
    if _lone_letter(c) in ("a", "A"):          # a spelled letter if a letter follows ("D A V")
        return True
    return _bare(c).strip(".") in ("dr", "st")


def _lone_letter(chunk: str | None) -> str | None:
    """The letter a chunk is, punctuation around it aside ("D", "a,", "(B)"), else None."""
    core = _clean(chunk or "").strip("\"'()[],.;:!?")
    return core if len(core) == 1 and core.isalpha() else None


def _spelled_a(chunk: str, prev: str | None, nxt: str | None) -> bool:
    """Whether a chunk that is the letter a is the letter, said "ey", not the article: beside
    another letter of the same case ("D A V I D", "k, o, w, a", but not "a B" or "am I a"), or
    a capital A that does not start a sentence ("Plan A", "gate A"; not after a shouted word)."""
    a = _lone_letter(chunk)
    if a not in ("a", "A"):
        return False
    for side in (prev, nxt):
        letter = _lone_letter(side)
        if letter is not None and letter.lower() != "i" and letter.isupper() == a.isupper():
            return True
    if a == "A" and prev is not None:
        before = _clean(prev).rstrip("\"')")
        shouted = before.isalpha() and len(before) > 1 and before.isupper()
        return bool(before) and before[-1] not in ".?!:" and not shouted
    return False


def _letters(text: str) -> list[Word]:
    return [Word(c.lower(), "letter") for c in text if c.isalpha()]


def _words(items: list[str]) -> list[Word]:
    return [Word("", "pau") if w == "," else Word(w) for w in items]


def _alnum(text: str) -> list[Word]:
    """A code like A12345: letters by name, digits one by one."""
    out: list[Word] = []
    for run in re.findall(r"[a-z]+|\d+|-", text, re.IGNORECASE):
        if run == "-":
            out.append(Word("", "pau"))
        else:
            out += _letters(run) if run[0].isalpha() else _words(
                num.digit_groups(run) if len(run) > 5 else num.digits(run))
    return out


def _number(text: str, prev: str, raw_prev: str, chunk: str, nxt: str | None) -> list[Word]:
    if "." in text:
        whole, _, frac = text.partition(".")
        return _words(num.decimal(whole.replace(",", ""), frac))
    if "," in text:
        return _words(num.cardinal(text))
    n = int(text)
    bare_prev = prev
    if len(text) >= 3 and _PURE_NUMBER.fullmatch(_clean(chunk)) and (
            _digit_count(raw_prev) >= 3 or _digit_count(nxt) >= 3):
        return _words(num.digits(text) + ([","] if _digit_count(nxt) >= 3 else []))
    if len(text) > 5:
        return _words(num.digit_groups(text))
    if len(text) >= 2 and text.startswith("0") or len(text) == 5:
        return _words(num.digits(text))
    if bare_prev.rstrip(".") in _MONTH_WORDS and 1 <= n <= 31:
        return _words(num.ordinal(n))
    if len(text) == 4 and 1000 <= n <= 2099 and (
            bare_prev in _YEAR_PREV or re.fullmatch(r"\d{1,2}(?:st|nd|rd|th)?,", raw_prev)):
        return _words(num.year(n))
    return _words(num.cardinal(text))


def _ampm(text: str | None) -> list[Word]:
    return _letters(text[0] + "m") if text else []


def expand_chunk(prev: str | None, chunk: str, nxt: str | None) -> list[Word]:
    """The reading of one whitespace-free chunk, given the raw chunks around it (``nxt`` is only
    read when ``needs_right_context(chunk)``; ``None`` at the start/end of the text)."""
    c = _clean(chunk)
    bprev = _bare(prev)
    nxt_clean = None if nxt is None else _clean(nxt)
    nxt_word = _bare(nxt).strip(".")
    nxt_capital = nxt_clean is not None and nxt_clean.lstrip("\"'(")[:1].isupper()
    out: list[Word] = []
    matches = list(_PIECE.finditer(c))
    for i, m in enumerate(matches):
        kind = next(name for name in _KINDS if m.group(name) is not None)
        text = m.group(0)
        last = i == len(matches) - 1
        if kind == "money":
            suffix = (m.group("suffix") or "").lower()
            scale = _SCALE_SUFFIX.get(suffix) or (nxt_word if last and nxt_word in _SCALES
                                                  else None)
            out += _words(num.money(m.group("money"), m.group("amount"), scale))
        elif kind in ("url", "email"):
            body = re.sub(r"^https?://", "", text, flags=re.IGNORECASE)
            for part in re.findall(r"[a-z]+|\d+|[.@/_-]", body, re.IGNORECASE):
                spoken = {".": "dot", "@": "at", "/": "slash", "_": "underscore",
                          "-": "dash"}.get(part)
                if spoken:
                    out.append(Word(spoken))
                elif part.isdigit():
                    out += _words(num.digits(part))
                elif part.lower() == "www" or len(part) == 1:
                    out += _letters(part)
                else:
                    out.append(Word(part.lower()))
        elif kind == "time":
            out += _words(num.clock(m.group("hh"), m.group("mm"))) + _ampm(m.group("ampm1"))
        elif kind == "hour":
            out += _words(num.cardinal(m.group("hour"))) + _ampm(m.group("ampm2"))
        elif kind in ("iso", "slash"):
            y, mo, d = ((m.group("iy"), m.group("im"), m.group("id")) if kind == "iso"
                        else (m.group("sy"), m.group("sm"), m.group("sd")))
            year_n = None if y is None else int(y) + (2000 if len(y) == 2 else 0)
            date_words = num.date(int(mo), int(d), year_n)
            out += _words(date_words) if date_words else _alnum(text)
        elif kind in ("dashed", "paren"):
            groups = re.findall(r"\d+", text)
            for g in groups:
                if out and out[-1].kind not in ("pau",) and g is not groups[0]:
                    out.append(Word("", "pau"))
                out += _words(num.digit_groups(g))
            if kind == "paren":
                out.append(Word("", "pau"))
        elif kind == "ordinal":
            out += _words(num.ordinal(int(m.group("ordinal"))))
        elif kind == "number":
            prev_piece = matches[i - 1].group(0) if i else ""
            body = m.group("number")
            if prev_piece == "#" and "." not in body and "," not in body:
                out += _words(num.digits(body) if len(body) > 4 else num.cardinal(body))
            else:
                out += _number(body, bprev if i == 0 else "", _clean(prev or "") if i == 0
                               else "", c, nxt if last else None)
            if m.group("pct"):
                out.append(Word("percent"))
        elif kind == "code":
            out += _alnum(text)
        elif kind == "dotted":
            low = text.lower()
            if low in _DOTTED:
                spoken = _DOTTED[low]
                out += _letters(spoken) if low in ("a.m.", "p.m.", "u.s.") else _words(
                    spoken.split())
            else:
                out += _letters(text)
            if last and nxt_capital and low not in ("a.m.", "p.m."):
                out.append(Word("", "end"))
            elif last and nxt_capital:
                out.append(Word("", "end"))
        elif kind == "spelled":
            out += _letters(text)
        elif kind == "word" and i == 0 and m.group("word").lower() in _SCALES and re.fullmatch(
                r"[$€£][\d,]*\d[,\d]*(?:\.\d+)?", _clean(prev or "")):
            continue                          # "$4 million": said with the amount
        elif kind == "word" and _spelled_a(c, prev, nxt):
            out += _letters("a") + ([Word("", "end")] if m.group("wdot") is not None else [])
        elif kind == "word":
            out += _word(m.group("word"), m.group("wdot") is not None, _clean(prev or ""),
                         nxt_word, nxt_capital, last)
        elif kind == "ellipsis":
            out.append(Word("", "pau"))
        elif kind == "end":
            out.append(Word("", "qend" if "?" in text else "end"))
        elif kind == "pau":
            out.append(Word("", "pau"))
        elif kind == "symbol":
            if text == "#":
                out.append(Word("number" if i + 1 < len(matches) and matches[i + 1].lastgroup
                                not in ("end", "pau", "ellipsis") else "pound"))
            elif text == "/" and out and i + 1 < len(matches) and matches[i + 1].group("word"):
                if out[-1].text != "and" or matches[i + 1].group(0).lower() != "or":
                    out.append(Word("or" if out[-1].text == "and" else "slash"))
            else:
                out += _words(_SYMBOLS[text].split())
    return out


def _word(w: str, dot: bool, prev: str, nxt_word: str, nxt_capital: bool,
          last: bool) -> list[Word]:
    """One alphabetic word (with an optional period after it)."""
    from .lexicon import default_lexicon

    low = w.lower().strip("'")
    end = [Word("", "end")] if dot else []
    if not low:
        return end
    if low in ("am", "pm") and (low == "pm" or re.search(r"\d[.,]?$", prev)) and (
            w.islower() or w.isupper()):
        return _letters(low) + end
    if low in _TITLES:
        return [Word(_TITLES[low])]
    if low in ("dr", "st") and (dot or last):
        after_name = bool(re.fullmatch(r"\d+|[A-Z][a-z]+", prev))
        if low == "dr":
            spoken = "drive" if after_name and not nxt_capital else "doctor"
        else:
            spoken = "street" if after_name or not nxt_capital else "saint"
        return [Word(spoken)]
    if dot and low == "no" and re.match(r"\d", nxt_word):
        return [Word("number")]
    if low in _ABBREV and (dot or low in ("ok", "mph", "lbs", "approx", "etc", "vs", "apt",
                                          "blvd", "ave", "acct")):
        return _words(_ABBREV[low].split()) + (end if last and nxt_capital else [])
    if dot and low in _DOT_ONLY and (w[0].isupper() or low not in _REAL_WORDS):
        return _words(_DOT_ONLY[low].split()) + (end if last and nxt_capital else [])
    if w.isupper() and 2 <= len(low) <= 5 and "'" not in low and (
            low in _SPELL or not default_lexicon().contains(low)):
        return _letters(low) + end
    return [Word(low)] + end


class IncrementalNormalizer:
    """Normalises text that arrives in fragments; releases words that can no longer change.

        inc = IncrementalNormalizer()
        inc.push("Call Dr.")      # -> []  ("Dr." waits for the next word)
        inc.push(" Lee at 5")     # -> [call, doctor, lee, at]
        inc.flush()               # -> [five, <end>]
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._prev: str | None = None
        self._held: str | None = None       # a complete chunk waiting for its right context
        self._last: Kind | None = None      # kind of the last released item
        self._spoken = False                # a word released since the last sentence end

    def push(self, fragment: str) -> list[Word]:
        self._buffer += fragment
        out: list[Word] = []
        while True:
            m = re.search(r"\s", self._buffer)
            if m is None:
                break
            chunk, self._buffer = self._buffer[:m.start()], self._buffer[m.end():]
            if chunk:
                out += self._complete(chunk)
        return out

    def flush(self) -> list[Word]:
        out: list[Word] = []
        chunk, self._buffer = self._buffer, ""
        if chunk.strip():
            out += self._complete(chunk.strip())
        if self._held is not None:
            out += self._release(self._held, None)
            self._held = None
        if self._spoken:
            out += self._emit([Word("", "end")])
        self._prev, self._last, self._spoken = None, None, False
        return out

    def _complete(self, chunk: str) -> list[Word]:
        out: list[Word] = []
        if self._held is not None:
            out += self._release(self._held, chunk)
            self._held = None
        if needs_right_context(chunk):
            self._held = chunk
        else:
            out += self._release(chunk, None)
        return out

    def _release(self, chunk: str, nxt: str | None) -> list[Word]:
        words = expand_chunk(self._prev, chunk, nxt)
        self._prev = chunk
        return self._emit(words)

    def _emit(self, words: list[Word]) -> list[Word]:
        """Drops pauses and ends with no word before them (since the last end) and repeats."""
        out: list[Word] = []
        for w in words:
            if w.kind in ("word", "letter"):
                self._spoken = True
            elif not self._spoken or self._last in ("pau", "end", "qend") and (
                    w.kind == "pau" or self._last != "pau"):
                continue
            elif w.kind != "pau":
                self._spoken = False
            out.append(w)
            self._last = w.kind
        return out


def normalize(text: str) -> list[Word]:
    """The whole text at once; always equal to one IncrementalNormalizer fed all of it."""
    inc = IncrementalNormalizer()
    return inc.push(text) + inc.flush()
