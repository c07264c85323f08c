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


class RedactingLogFilter(logging.Filter):
    """Masks card numbers, SSNs and sensitive slot values in each line (``pipeline.redaction``)
    before a handler writes it; the line's arguments are folded into its message first."""

    def __init__(self, redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.redactor.text(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def redact_logs(redactor) -> None:
    """Mask what ``redactor`` masks in every line the root logger's handlers (and pipecat's
    loguru) write; called again, it replaces the filter it installed."""
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactingLogFilter)]:
            handler.removeFilter(old)
        handler.addFilter(RedactingLogFilter(redactor))
    try:
        from loguru import logger

        def mask(record) -> None:
            record["message"] = redactor.text(record["message"])

        logger.configure(patcher=mask)
    except ImportError:
        pass
