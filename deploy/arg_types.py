"""Argument types the ``parley`` commands share: numbers in a range, ports.

    p.add_argument("--port", type=port_number)
    p.add_argument("--drain-s", type=lambda t: float_in(t, 0.0, 3600.0, "seconds"))

A value out of range is one line (``parley serve: error: argument --port: a port is 0..65535, got
70000``), never a traceback; ``OneLineParser`` keeps the usage text for ``--help``.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line on stderr and exit status 2; the usage is ``--help``'s alone
    (argparse's own error prints the whole usage first, 20 lines for ``parley serve``, before the
    one line that says what was wrong). Subcommands' parsers are made of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def int_in(text: str, lo: int, hi: int, what: str, out_of_range: str) -> int:
    """An integer in lo..hi; else argparse's one-line error (``what`` expected, ``out_of_range``)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not lo <= n <= hi:
        raise argparse.ArgumentTypeError(f"{out_of_range}, got {n}")
    return n


def float_in(text: str, lo: float, hi: float, what: str) -> float:
    """A number in lo..hi (NaN is not); else argparse's one-line error."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not lo <= x <= hi:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected {what} in {lo:g}..{hi:g}, got {text}")
    return x


def port_number(text: str) -> int:
    """A TCP/UDP port, 0..65535 (0: any free one)."""
    return int_in(text, 0, 65535, "a port number", "a port is 0..65535")
