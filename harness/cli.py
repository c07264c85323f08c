"""``parley call`` and ``parley eval stt|tts``: the harness's commands, plugged into ``parley``.

``pyproject.toml`` names :func:`register_cli` under the ``parley.commands`` entry point group;
``deploy.cli`` loads every entry of that group when it builds its parser, so the product's
command line offers these commands without importing the harness.
"""

from __future__ import annotations

from typing import Any

from harness.call_cli import register_cli as register_call
from harness.stt_eval import register_cli as register_stt_eval
from harness.tts_eval import register_cli as register_tts_eval

__all__ = ["register_cli"]


def register_cli(subparsers: Any) -> None:
    """Add ``call``, ``eval stt`` and ``eval tts`` to the ``parley`` command's subparsers."""
    register_call(subparsers)
    register_stt_eval(subparsers)  # parley eval stt
    register_tts_eval(subparsers)  # parley eval tts
