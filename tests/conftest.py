"""Test-wide settings."""

import pipecat.tests.utils as pipecat_test_utils

# pipecat's run_test gives a pipeline 1 s to start. Starting ours loads models (a pocketsphinx
# decoder alone takes ~0.45 s idle), and on a loaded 2-core CI machine that overran 1 s and
# failed tests at random. Regression guard for that flake: allow 20 s to start.
pipecat_test_utils.run_test.__kwdefaults__["start_timeout"] = 20.0

# `parley serve` and `parley eval stt` compile the SSM recognizer's k-frame prefill (torch.compile,
# ~30 s cold) unless PARLEY_STT_COMPILE=0: the servers tests start as processes run it eagerly.
# (In process, engines are eager unless asked; the compiled path has its own tests, which ask.)
import os  # noqa: E402

os.environ.setdefault("PARLEY_STT_COMPILE", "0")
os.environ.setdefault("PARLEY_TTS_COMPILE", "0")   # the same for the voice's steps (~20 s cold)


# Nothing a test's client sends may make the HTTP server log a traceback: client faults are one
# line (telephony.server's filter turns aiohttp's into INFO), so an ERROR with a traceback from
# aiohttp's request handling is a bug of ours, and fails the test that caused it.
import logging  # noqa: E402

import pytest  # noqa: E402


class _TracebackCatcher(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@pytest.fixture(autouse=True)
def no_request_tracebacks():
    catcher = _TracebackCatcher()
    server_log = logging.getLogger("aiohttp.server")
    server_log.addHandler(catcher)
    try:
        yield
    finally:
        server_log.removeHandler(catcher)
    if catcher.records:
        record = catcher.records[0]
        exc = record.exc_info[1] if record.exc_info else None
        pytest.fail(f"the HTTP server logged {len(catcher.records)} traceback(s) handling requests: "
                    f"{record.getMessage()}: {type(exc).__name__}: {exc}")


@pytest.fixture
def moto_env(monkeypatch):
    """Credentials for moto's AWS in memory (us-east-1), and none of the machine's AWS settings."""
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")


# A test that runs `parley ...` in process (deploy.cli.main) points the root logger at the stderr
# pytest captured for it (logging.basicConfig(force=True)); once that capture is closed, a later
# test's log lines would fail with "--- Logging error ---". Each test gets the root logger back as
# it found it.
@pytest.fixture(autouse=True)
def root_logging_restored():
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in before and type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.setLevel(level)


# Real speech from flite, cached per session (the pipeline's and the model server's tests).
import shutil  # noqa: E402
import subprocess  # noqa: E402
import wave  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import soxr  # noqa: E402


@pytest.fixture(scope="session")
def flite_speech(tmp_path_factory) -> Callable[[str, int], np.ndarray]:
    """``flite_speech(text, rate_hz, voice="slt")`` -> int16 mono speech at ``rate_hz``."""
    if shutil.which("flite") is None:
        pytest.skip("flite not installed (apt-get install flite)")
    folder: Path = tmp_path_factory.mktemp("flite")
    cache: dict[tuple[str, str], tuple[np.ndarray, int]] = {}

    def speech(text: str, rate_hz: int, voice: str = "slt") -> np.ndarray:
        if (voice, text) not in cache:
            path = folder / f"{len(cache)}.wav"
            subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(path)], check=True)
            with wave.open(str(path)) as w:
                pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
                cache[(voice, text)] = (pcm, w.getframerate())
        pcm, native = cache[(voice, text)]
        return pcm if native == rate_hz else soxr.resample(pcm, native, rate_hz)

    return speech


@pytest.fixture
def one_torch_thread():
    """Torch on one thread for the test, as the engines run in production: with 2 threads on
    these 2-core machines small steps run 5-40x slower (FACTS.md). A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
