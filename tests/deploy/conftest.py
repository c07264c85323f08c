"""Fixtures shared by the model tier's tests."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def parley_json(*argv: str):
    """``parley ARGV`` (a command that prints JSON): its parser and command, run in this process
    (a ``python -m deploy.cli`` of its own costs ~5 s of imports); what it printed, parsed."""
    from deploy.cli import build_parser

    args = build_parser().parse_args(list(argv))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = args.func(args)
    assert not code, out.getvalue()
    return json.loads(out.getvalue())


def calls_show(call_id: str, db: Path) -> dict:
    """``parley calls show CALL_ID --json --db DB``: the record."""
    return parley_json("calls", "show", call_id, "--json", "--db", str(db))


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL 15 cluster (Debian's), for call servers that share their records."""
    import shutil

    from tests.pipeline.test_records_postgres import Cluster

    cluster = Cluster()
    cluster.start()
    try:
        yield cluster.url
    finally:
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def model_server_pool():
    """The model servers the model tier's tests share (tests.deploy.model_servers.ServerPool)."""
    from tests.deploy.model_servers import ServerPool

    pool = ServerPool()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def engines_local():
    """The in-process engines on the same models: what the remote ones must match."""
    from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, SSMVoiceEngine
    from pipeline.engines.ssm_recognizer import SSMSTTEngine

    class Local:
        voice = SSMVoiceEngine(DEFAULT_MODEL_DIR)       # the default voice, as a request naming none gets
        recogniser = SSMSTTEngine(ROOT / "models" / "stt", compile=False)
        seconds: dict[str, float] = {}

        async def audio(self, text: str) -> np.ndarray:
            pcm = np.concatenate([c.pcm async for c in self.voice.open(8000).speak(text)])
            self.seconds[text] = len(pcm) / 8000
            return pcm

        async def speak_words(self, text: str) -> list[list[str]]:
            chunks = [c async for c in self.voice.open(8000).speak(text)]
            self.seconds[text] = sum(len(c.pcm) for c in chunks) / 8000
            return [[w for w, _ in c.words] for c in chunks]

    local = Local()
    yield local
    local.voice.close()
    local.recogniser.close()
