"""Logging for every ``parley`` command: one format on stderr, pipecat's per-frame DEBUG kept out."""

from __future__ import annotations

import logging
import sys


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    # aioice (under aiortc) logs every ICE candidate pair's state change at INFO: a browser call's
    # set-up would fill the log; its warnings still show
    wanted = getattr(logging, level.upper())
    logging.getLogger("aioice").setLevel(wanted if wanted == logging.DEBUG else max(logging.WARNING, wanted))
    try:  # pipecat logs through loguru at DEBUG per frame; keep it to warnings unless asked
        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level="DEBUG" if level.upper() == "DEBUG" else "WARNING")
    except ImportError:
        pass
