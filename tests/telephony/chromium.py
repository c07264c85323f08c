"""Headless Chromium for the page tests, through Playwright: ``async_api`` and the ``CHROMIUM``
binary, and ``needs_chromium``, the mark that skips (with the reason) where either is missing;
CI installs both (scripts/install-system-deps, the test extra)."""

from __future__ import annotations

import shutil

import pytest

async_api = pytest.importorskip("playwright.async_api",
                                reason="playwright is not installed (pip install playwright)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (scripts/install-system-deps installs it)")
