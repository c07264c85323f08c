"""Spoken readings of numbers for phone talk: cardinals, ordinals, years, digit strings, money,
times and dates. Every function returns a list of lowercase words (``","`` marks a short pause).

    cardinal("4,500")          # -> ["four", "thousand", "five", "hundred"]
    digit_groups("5551234567") # -> ["five", "five", "five", ",", "one", ... "seven"]
    money("$", "12.50")        # -> ["twelve", "dollars", "and", "fifty", "cents"]
    clock("3", "05")           # -> ["three", "oh", "five"]

Cardinals and ordinals come from ``ssm_engine.stt.text`` (the recogniser's scoring form), so both
sides of the project read numbers the same way.
"""

from __future__ import annotations

from ..words import number_to_words, ordinal_words

__all__ = ["DIGITS", "MONTHS", "cardinal", "ordinal", "year", "digits", "digit_groups",
           "decimal", "money", "clock", "date"]

DIGITS = ("zero one two three four five six seven eight nine").split()
MONTHS = ("january february march april may june july august september october november "
          "december").split()
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence")}
_MAX = 10**12


def cardinal(text: str) -> list[str]:
    """Digits (commas allowed) -> cardinal words; 13+ digits are read digit by digit."""
    plain = text.replace(",", "")
    n = int(plain)
    if n >= _MAX:
        return digits(plain)
    return number_to_words(n).split()


def ordinal(n: int) -> list[str]:
    """3 -> ["third"], 21 -> ["twenty", "first"]."""
    if n >= _MAX:
        return digits(str(n)) + ["th"]
    return ordinal_words(n).split()


def year(n: int) -> list[str]:
    """Years as said: 1984 -> nineteen eighty four, 2005 -> two thousand five, 2024 -> twenty
    twenty four, 1900 -> nineteen hundred."""
    if not 1000 <= n <= 9999 or 2000 <= n <= 2009 or n % 1000 == 0:
        return cardinal(str(n))
    head, tail = divmod(n, 100)
    words = number_to_words(head).split()
    if tail == 0:
        return words + ["hundred"]
    if tail < 10:
        return words + ["oh", DIGITS[tail]]
    return words + number_to_words(tail).split()


def digits(text: str) -> list[str]:
    """Each digit as a word: "042" -> ["zero", "four", "two"]."""
    return [DIGITS[int(d)] for d in text if d.isdigit()]


def _group_sizes(n: int) -> list[int]:
    """How a digit string of length n is grouped: up to 5 in one breath, 10 as 3-3-4, else
    threes with the remainder folded into fours at the end."""
    if n <= 5:
        return [n]
    if n == 10:
        return [3, 3, 4]
    if n == 11:
        return [1, 3, 3, 4]
    sizes = [3] * (n // 3)
    for i in range(n % 3):
        sizes[-1 - i] += 1
    return sizes


def digit_groups(text: str) -> list[str]:
    """A long digit string (phone, order, account number) digit by digit, in groups of 3-4 with
    a short pause (",") between groups: 10 digits as 3-3-4, 7 as 3-4."""
    out: list[str] = []
    pos = 0
    for size in _group_sizes(len(text)):
        if out:
            out.append(",")
        out += digits(text[pos:pos + size])
        pos += size
    return out


def decimal(whole: str, frac: str) -> list[str]:
    """"3", "14" -> three point one four."""
    return cardinal(whole or "0") + ["point"] + digits(frac)


def money(symbol: str, amount: str, scale: str | None = None) -> list[str]:
    """"$", "12.50" -> twelve dollars and fifty cents; "$", "4", "million" -> four million
    dollars; "$", "0.99" -> ninety nine cents."""
    one, many, sub_one, sub_many = _CURRENCY[symbol]
    whole, _, frac = amount.replace(",", "").partition(".")
    if scale is not None:
        head = decimal(whole, frac) if frac else cardinal(whole or "0")
        return head + [scale, many]
    units = int(whole or "0")
    cents = int((frac + "00")[:2]) if frac else 0
    words: list[str] = []
    if units or not cents:
        words = cardinal(str(units)) + [one if units == 1 else many]
    if cents:
        if words:
            words.append("and")
        words += cardinal(str(cents)) + [sub_one if cents == 1 else sub_many]
    return words


def clock(hours: str, minutes: str) -> list[str]:
    """"3", "45" -> three forty five; "3", "00" -> three o'clock; "3", "05" -> three oh five."""
    words = cardinal(str(int(hours)))
    m = int(minutes)
    if m == 0:
        return words + ["o'clock"]
    if m < 10:
        return words + ["oh", DIGITS[m]]
    return words + cardinal(str(m))


def date(month: int, day: int, year_n: int | None) -> list[str] | None:
    """Month 1-12, day 1-31 -> "may twelfth [twenty twenty four]"; None if not a date."""
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    words = [MONTHS[month - 1]] + ordinal(day)
    if year_n is not None:
        words += year(year_n)
    return words
