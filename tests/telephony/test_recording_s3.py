"""Call recordings stored in S3 (moto's S3 in memory, no network): a loopback Twilio call whose
recording is uploaded encrypted and verified, its record and webhook then carrying the s3:// URL;
multipart above the part size; SSE-KMS; an upload that fails leaves the file and one log line
(a missing bucket, a part refused mid-way: the multipart upload aborted); the start's sweep sends
what was left on disk and points the records at it."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from agent.echo import EchoAgentProcessor
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from pipeline.audio.recordings import read_recording
from pipeline.builder import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.records import CallRecord, MemoryCallStore
from pipeline.recordings_s3 import MIN_PART_SIZE_BYTES, RecordingsS3Config
from telephony.core.uploads import RecordingUploader, s3_etag
from telephony.server import CallServer, ServerConfig
from telephony.webhooks import call_event

from .conftest import TOKEN

REGION = "us-east-1"
MiB = 1024 * 1024


@pytest.fixture
def s3(moto_env):
    """moto's S3 (and KMS), with credentials that reach nothing, and one bucket."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket="acme-calls")
        yield client


def _recording(folder: Path, name: str, size: int, day: str = "2026-12-07") -> Path:
    path = folder / day / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"OggS" + os.urandom(size - 4))
    return path


def test_a_recording_above_the_part_size_goes_up_in_parts_encrypted_verified_then_removed(s3, tmp_path):
    config = RecordingsS3Config.parse("s3://acme-calls/parley", part_size_bytes=MIN_PART_SIZE_BYTES)
    path = _recording(tmp_path, "CA1.opus", 2 * MIN_PART_SIZE_BYTES + 123)
    data, etag = path.read_bytes(), s3_etag(path, MIN_PART_SIZE_BYTES)
    calls: list[str] = []
    uploader = RecordingUploader(config, tmp_path)
    uploader.client.meta.events.register("before-call.s3.*", lambda model, **_: calls.append(model.name))

    url = uploader.upload(path)

    assert url == "s3://acme-calls/parley/2026-12-07/CA1.opus"
    assert calls.count("UploadPart") == 3 and "CompleteMultipartUpload" in calls and "PutObject" not in calls
    head = s3.head_object(Bucket="acme-calls", Key="parley/2026-12-07/CA1.opus")
    assert head["ServerSideEncryption"] == "AES256" and head["ContentType"] == "audio/ogg"
    assert head["ETag"].strip('"') == etag and etag.endswith("-3")
    assert s3.get_object(Bucket="acme-calls", Key="parley/2026-12-07/CA1.opus")["Body"].read() == data
    assert not path.exists()   # removed once verified

    small = _recording(tmp_path, "CA2.wav", 1000)
    assert uploader.upload(small).endswith("/CA2.wav") and calls.count("PutObject") == 1
    assert s3.head_object(Bucket="acme-calls", Key="parley/2026-12-07/CA2.wav")["ContentType"] == "audio/wav"


def test_sse_kms_with_the_operators_key_and_local_copies_kept(s3, tmp_path):
    import boto3

    key_id = boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["KeyId"]
    config = RecordingsS3Config.parse("s3://acme-calls/", kms_key_id=key_id, keep_local=True)
    path = _recording(tmp_path, "CA3.opus", 5000)
    uploader = RecordingUploader(config, tmp_path)
    assert uploader.upload(path) == "s3://acme-calls/2026-12-07/CA3.opus"
    head = s3.head_object(Bucket="acme-calls", Key="2026-12-07/CA3.opus")
    assert head["ServerSideEncryption"] == "aws:kms" and key_id in head["SSEKMSKeyId"]
    assert path.exists()
    # a kept file is not sent twice: the next sweep only checks it
    calls: list[str] = []
    uploader.client.meta.events.register("before-call.s3.*", lambda model, **_: calls.append(model.name))
    assert uploader.upload(path).endswith("CA3.opus") and calls == ["HeadObject"]


def test_an_upload_to_a_missing_bucket_leaves_the_file_and_says_why_in_one_line(s3, tmp_path, caplog):
    config = RecordingsS3Config.parse("s3://no-such-bucket/x")
    path = _recording(tmp_path, "CA4.opus", 3000)
    uploader = RecordingUploader(config, tmp_path)
    with caplog.at_level(logging.INFO, logger="telephony.core.uploads"):
        assert uploader.submit(path).result(timeout=30) is None
    lines = [r for r in caplog.records if r.name == "telephony.core.uploads"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING, [r.getMessage() for r in lines]
    message = lines[0].getMessage()
    assert "\n" not in message and "NoSuchBucket" in message and "s3://no-such-bucket/x/2026-12-07/CA4.opus" in message
    assert path.exists() and uploader.failed == 1


def test_a_part_refused_mid_way_aborts_the_multipart_upload_and_keeps_the_file(s3, tmp_path, caplog):
    from botocore.exceptions import ClientError

    config = RecordingsS3Config.parse("s3://acme-calls/p", part_size_bytes=MIN_PART_SIZE_BYTES)
    path = _recording(tmp_path, "CA5.opus", MIN_PART_SIZE_BYTES + 10)
    uploader = RecordingUploader(config, tmp_path)
    parts: list[int] = []

    def refuse_the_second_part(params, **_):
        parts.append(params["PartNumber"])
        if params["PartNumber"] == 2:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "UploadPart")

    uploader.client.meta.events.register("before-parameter-build.s3.UploadPart", refuse_the_second_part)
    with caplog.at_level(logging.WARNING, logger="telephony.core.uploads"):
        assert uploader.submit(path).result(timeout=30) is None
    assert parts == [1, 2] and path.exists()
    assert "injected" in caplog.text and len(caplog.records) == 1
    assert s3.list_multipart_uploads(Bucket="acme-calls").get("Uploads", []) == []   # aborted
    assert "Contents" not in s3.list_objects_v2(Bucket="acme-calls")


def test_the_sweep_sends_what_was_left_on_disk_and_points_the_records_at_it(s3, tmp_path):
    from deploy.serve_cli import _sweep_recordings

    left = [_recording(tmp_path, "CA6.opus", 2000, "2026-12-05"), _recording(tmp_path, "CA7.wav", 3000)]
    for path in left:
        os.utime(path, (time.time() - 120,) * 2)
    live = _recording(tmp_path, "CA10.opus", 2000)   # written just now: another server's live call
    store = MemoryCallStore()
    store.open(CallRecord(call_sid="CA6", transport="twilio", ended_at=time.time(), recording=str(left[0])))
    config = RecordingsS3Config.parse("s3://acme-calls/swept")
    _sweep_recordings(config, str(tmp_path), store)
    uploader = RecordingUploader.shared(config, str(tmp_path))
    assert uploader.wait_idle(30) == 0
    assert not any(p.exists() for p in left) and uploader.uploaded == 2
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="acme-calls")["Contents"])
    assert keys == ["swept/2026-12-05/CA6.opus", "swept/2026-12-07/CA7.wav"] and live.exists()
    assert store.get("CA6").recording == "s3://acme-calls/swept/2026-12-05/CA6.opus"


async def test_at_stop_the_uploads_still_queued_get_a_while_and_what_is_left_is_said(s3, tmp_path, monkeypatch, caplog):
    import threading

    from deploy import serve_cli

    config = RecordingsS3Config.parse("s3://acme-calls/stop")
    uploader = RecordingUploader.shared(config, str(tmp_path))
    release = threading.Event()
    uploader.client.meta.events.register("before-parameter-build.s3.PutObject", lambda **_: release.wait(30))
    paths = [_recording(tmp_path, f"CA1{i}.opus", 1000) for i in range(2)]
    for path in paths:
        uploader.submit(path)
    monkeypatch.setattr(serve_cli, "UPLOADS_AT_STOP_S", 0.2)
    with caplog.at_level(logging.WARNING, logger="parley"):
        await serve_cli._finish_uploads(config, str(tmp_path))
    assert "2 upload(s) not done at stop" in caplog.text and all(p.exists() for p in paths)
    release.set()
    monkeypatch.setattr(serve_cli, "UPLOADS_AT_STOP_S", 30.0)
    await serve_cli._finish_uploads(config, str(tmp_path))   # within the bound: all stored
    assert uploader.wait_idle(0) == 0 and not any(p.exists() for p in paths)


def test_the_s3_settings_come_from_the_flags_else_the_spec_and_bad_ones_are_refused():
    import argparse

    from agent.errors import SpecError
    from agent.spec import parse_spec
    from deploy.serve_cli import _recordings_s3

    spec = parse_spec("name: x\ngreeting: Hi.\nrecording:\n  s3: s3://acme-calls/spec\n  kms_key: alias/calls\n"
                      "  keep_local: true\n", env={})
    flags = argparse.Namespace(recordings_s3=None, recordings_kms_key=None, keep_local=False)
    assert _recordings_s3(flags, spec) == RecordingsS3Config("acme-calls", "spec/", "alias/calls", True)
    flags = argparse.Namespace(recordings_s3="s3://other/p/", recordings_kms_key=None, keep_local=False)
    assert _recordings_s3(flags, spec) == RecordingsS3Config("other", "p/", "alias/calls", True)
    assert _recordings_s3(flags, None) == RecordingsS3Config("other", "p/")
    assert _recordings_s3(argparse.Namespace(recordings_s3=None, recordings_kms_key=None, keep_local=False),
                          None) is None
    with pytest.raises(ConfigError, match="--recordings-s3: not an s3:// URL"):
        _recordings_s3(argparse.Namespace(recordings_s3="https://x/", recordings_kms_key=None, keep_local=False), None)
    with pytest.raises(SpecError, match="recording.s3"):
        parse_spec("name: x\ngreeting: Hi.\nrecording:\n  s3: https://acme-calls/\n", env={})
    with pytest.raises(ConfigError, match="bucket"):
        RecordingsS3Config.parse("s3://Bad_Bucket/")
    with pytest.raises(ConfigError, match="minimum part"):
        RecordingsS3Config("acme-calls", part_size_bytes=1024)
    with pytest.raises(Exception, match="needs recordings_dir"):
        PipelineConfig(recordings_s3=RecordingsS3Config("acme-calls"))


async def _call(tmp_path, config: RecordingsS3Config):
    """One loopback Twilio call to a server recording into ``tmp_path`` and uploading to ``config``."""
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, pipeline=PipelineConfig(
                            recordings_dir=str(tmp_path), recordings_s3=config)),
                        agent_factory=lambda _info: EchoAgentProcessor())
    await server.start()
    caller = CallerConfig(url=f"ws://127.0.0.1:{server.port}/twilio/stream", auth_token=TOKEN,
                          utterances=(CallerUtterance(text="hello how are you"),), timeout_s=60)
    try:
        report = await run_call(caller)
    finally:
        await server.stop()
    return server, report


async def test_a_twilio_call_is_recorded_uploaded_and_its_record_and_webhook_carry_the_s3_url(s3, tmp_path):
    server, report = await _call(tmp_path, RecordingsS3Config.parse("s3://acme-calls/calls"))
    record = server.store.get(report.call_sid)
    assert record is not None and record.ended
    key = f"calls/{time.strftime('%Y-%m-%d')}/{report.call_sid}.opus"
    assert record.recording == f"s3://acme-calls/{key}"
    assert call_event(record)["recording_url"] == record.recording
    assert not list(tmp_path.glob("*/*.opus"))   # removed once stored
    head = s3.head_object(Bucket="acme-calls", Key=key)
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] > 1000
    copy = tmp_path / "copy.opus"
    copy.write_bytes(s3.get_object(Bucket="acme-calls", Key=key)["Body"].read())
    pcm, rate = read_recording(copy)
    assert rate == 8000 and pcm.shape[1] == 2 and len(pcm) > 8000   # both channels, over a second


async def test_the_call_page_streams_a_recording_from_its_bucket_and_says_where_others_are(s3, tmp_path):
    import aiohttp

    from .timeline.conftest import API_TOKEN, write_recording

    folder = tmp_path / "recordings"
    config = RecordingsS3Config.parse("s3://acme-calls/calls")
    path = folder / "2026-12-07" / "CA8.wav"
    write_recording(path, seconds=2.0)
    data = path.read_bytes()
    url = RecordingUploader.shared(config, folder).upload(path)
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, twilio=False, api_token=API_TOKEN,
                                     pipeline=PipelineConfig(recordings_dir=str(folder), recordings_s3=config)),
                        agent_factory=lambda _info: EchoAgentProcessor())
    server.store.open(CallRecord(call_sid="CA8", transport="sip", ended_at=time.time(), recording=url,
                                 marks_s={"recording_start": 0.2}))
    server.store.open(CallRecord(call_sid="CA9", transport="sip", ended_at=time.time(),
                                 recording="s3://someone-else/calls/CA9.wav"))
    await server.start()
    base, bearer = f"http://127.0.0.1:{server.port}", {"Authorization": f"Bearer {API_TOKEN}"}
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/ui/api/calls/CA8", headers=bearer) as r:
                assert (await r.json())["recording"] == {"available": True, "url": "/ui/calls/CA8/recording",
                                                         "offset_s": 0.2, "waveform": None}
            async with s.get(f"{base}/ui/calls/CA8/recording", headers=bearer) as r:
                assert r.status == 200 and r.headers["Content-Type"] == "audio/wav" and await r.read() == data
            async with s.get(f"{base}/ui/calls/CA8/recording", headers=bearer | {"Range": "bytes=44-47"}) as r:
                assert r.status == 206 and await r.read() == data[44:48]
                assert r.headers["Content-Range"] == f"bytes 44-47/{len(data)}"
            async with s.get(f"{base}/ui/calls/CA8/recording") as r:   # behind the same gate
                assert r.status == 401
            async with s.get(f"{base}/ui/api/calls/CA9", headers=bearer) as r:
                assert (await r.json())["recording"] == {
                    "available": False, "why": "the recording is kept elsewhere (not on this server)"}
    finally:
        await server.stop()


async def test_an_upload_slower_than_the_calls_end_puts_its_url_in_the_record_when_it_lands(s3, tmp_path, monkeypatch):
    """The call's end waits at most UPLOAD_WAIT_S: past it the record ends with the file's path and
    is pointed at S3 once the upload is stored."""
    import asyncio

    from telephony.core import supervisor

    monkeypatch.setattr(supervisor, "UPLOAD_WAIT_S", 0.0)
    ended_with: list[str | None] = []
    real_ended = supervisor.CallBook.ended
    monkeypatch.setattr(supervisor.CallBook, "ended",
                        lambda book, reason: (ended_with.append(book.record.recording), real_ended(book, reason)))
    server, report = await _call(tmp_path, RecordingsS3Config.parse("s3://acme-calls/late"))
    assert ended_with and ended_with[0].startswith(str(tmp_path))   # the end (and its webhook): the path
    record = server.store.get(report.call_sid)
    for _ in range(300):
        if record.recording.startswith("s3://"):
            break
        await asyncio.sleep(0.05)
    assert record.recording == f"s3://acme-calls/late/{time.strftime('%Y-%m-%d')}/{report.call_sid}.opus"
