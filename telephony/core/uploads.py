"""Call recordings to Amazon S3: each closed recording uploaded off the event loop, verified, and
only then removed from the disk.

    uploader = RecordingUploader.shared(s3_config, recordings_dir)   # one thread, one S3 client
    future = uploader.submit(path)        # a concurrent Future: the s3:// URL, or None (kept on disk)
    uploader.upload(path)                 # the thread's work, synchronous: the URL, or RecordingUploadError
    uploader.sweep(on_uploaded)           # at start: every recording left on disk, queued
    uploader.wait_idle(timeout_s)         # at stop: until the queue is done; returns how many are left
    uploader.read(url, byte_range)        # the call pages: the object's bytes (S3's GetObject)

The key is the config's prefix and the file's path under the recordings folder
(``PREFIX/YYYY-MM-DD/CALL_ID.opus``). An upload is boto3's managed transfer: one PutObject below
``part_size_bytes``, else a multipart upload in parts of that size, which s3transfer aborts when a
part fails. Every request has timeouts and botocore's standard retries (``MAX_ATTEMPTS``, with
backoff); the object is encrypted at rest (SSE-S3 ``AES256``, or SSE-KMS with the config's key).
It is verified by a HEAD: its size, its encryption and, under SSE-S3, its ETag (the file's MD5,
or for a multipart upload the MD5 of its parts' MD5s and the part count); then the file is removed
unless ``keep_local``. A recording already stored (same key, size and ETag) is not sent again, so
a sweep after a crash or with ``keep_local`` costs a HEAD a file.

A failed upload leaves the file where it is and logs one line saying why; the next start's sweep
sends it. Calls never wait on it beyond what the supervisor allows (``UPLOAD_WAIT_S`` there), and
the event loop never does: the uploads run on this module's one daemon thread.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from pipeline.audio.recordings import MEDIA_TYPES, SUFFIXES
from pipeline.recordings_s3 import RecordingsS3Config, split_s3_url
from telephony.errors import RecordingUploadError

__all__ = ["OnUploaded", "RecordingUploader"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
SWEEP_QUIET_S = 60.0   # a recording is written every 0.5 s: one untouched this long is no live call's
MAX_ATTEMPTS = 5   # botocore's standard retry mode: each request up to 5 times, backing off with jitter
_MEDIA_BY_SUFFIX = {suffix: MEDIA_TYPES[fmt] for fmt, suffix in SUFFIXES.items()}

OnUploaded = Callable[[Path, str], None]
"""Called on the uploader's thread with the file and its s3:// URL once stored; must not raise."""


def s3_etag(path: Path, part_size_bytes: int) -> str:
    """The ETag S3 gives the file uploaded as :meth:`RecordingUploader.upload` sends it (SSE-S3):
    the MD5 of one PutObject, or the MD5 of the parts' MD5s and ``-N`` for N parts."""
    digests = []
    with open(path, "rb") as f:
        while chunk := f.read(part_size_bytes):
            digests.append(hashlib.md5(chunk, usedforsecurity=False).digest())
    if path.stat().st_size < part_size_bytes:
        return (digests[0] if digests else hashlib.md5(b"", usedforsecurity=False).digest()).hex()
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"


class RecordingUploader:
    """The uploads of one recordings folder to one bucket and prefix, in order, on one thread."""

    _shared: dict[tuple[RecordingsS3Config, str], RecordingUploader] = {}
    _shared_lock = threading.Lock()

    def __init__(self, config: RecordingsS3Config, recordings_dir: str | Path, *, client: Any = None):
        self.config = config
        self.root = Path(recordings_dir).resolve()
        self._client = client
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self.uploaded = 0
        self.failed = 0

    @classmethod
    def shared(cls, config: RecordingsS3Config, recordings_dir: str | Path) -> RecordingUploader:
        """The process's uploader for this config and folder (every call of a server shares it)."""
        key = (config, str(Path(recordings_dir).resolve()))
        with cls._shared_lock:
            if key not in cls._shared:
                cls._shared[key] = cls(config, recordings_dir)
            return cls._shared[key]

    @property
    def client(self) -> Any:
        """boto3's S3 client, made at first use (credentials and region as boto3 finds them)."""
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                self._client = boto3.session.Session().client("s3", region_name=self.config.region, config=Config(
                    connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                    retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS}))
            return self._client

    # -- the queue ----------------------------------------------------------------------------

    def submit(self, path: str | Path, on_uploaded: OnUploaded | None = None) -> Future[str | None]:
        """Queue ``path``; the future's result is its s3:// URL, or None when the upload failed."""
        future: Future[str | None] = Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="recordings-s3", daemon=True)
                self._thread.start()
            self._pending += 1
        self._queue.put((Path(path), on_uploaded, future))
        return future

    def wait_idle(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every queued upload to end; returns how many had not."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0, timeout_s)
            return self._pending

    def sweep(self, on_uploaded: OnUploaded | None = None, *, now: float | None = None) -> int:
        """Queue every recording in the folder (uploads that failed, a process that died before
        its upload) but those written in the last ``SWEEP_QUIET_S`` (another server's live call
        sharing the folder: the next start takes them); returns how many. Call it before the
        server takes calls."""
        cutoff = (time.time() if now is None else now) - SWEEP_QUIET_S
        queued = 0
        for path in sorted(p for suffix in SUFFIXES.values() for p in self.root.glob(f"*/*{suffix}")):
            try:
                if path.stat().st_mtime > cutoff:
                    continue
            except OSError:
                continue   # gone meanwhile
            self.submit(path, on_uploaded)
            queued += 1
        return queued

    def _run(self) -> None:
        while True:
            path, on_uploaded, future = self._queue.get()
            if future.set_running_or_notify_cancel():
                future.set_result(self._store(path, on_uploaded))
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def _store(self, path: Path, on_uploaded: OnUploaded | None) -> str | None:
        url: str | None = None
        try:
            url = self.upload(path)
            if on_uploaded is not None:
                on_uploaded(path, url)
        except RecordingUploadError as exc:
            self.failed += 1
            log.warning("[%s] recording not uploaded (%s); kept at %s, sent again at the next start",
                        path.stem, exc, path)
        except Exception:  # noqa: BLE001 (this thread serves every call: a bug here must not stop it)
            if url is None:
                self.failed += 1
            log.exception("[%s] recording %s: %s", path.stem, path, f"stored at {url}, then an error" if url
                          else "not uploaded; kept, sent again at the next start")
        return url

    # -- one upload ---------------------------------------------------------------------------

    def key_for(self, path: Path) -> str:
        try:
            relative = path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            relative = path.name
        return self.config.key_for(relative)

    def upload(self, path: str | Path) -> str:
        """Store ``path`` (if not stored already), verify it, remove the file unless kept; returns
        its s3:// URL. Raises :class:`RecordingUploadError`; the file is then untouched."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        path = Path(path)
        key = self.key_for(path)
        url = self.config.url_for(key)
        try:
            size = path.stat().st_size
            etag = s3_etag(path, self.config.part_size_bytes) if self.config.kms_key_id is None else None
            if self._differs(key, size, etag, unreadable_is_missing=True) is not None:
                self._put(path, key)
                why = self._differs(key, size, etag, unreadable_is_missing=False)
                if why is not None:
                    raise RecordingUploadError(f"{url}: stored, but {why}")
        except (Boto3Error, BotoCoreError, ClientError, OSError) as exc:
            raise RecordingUploadError(f"{url}: {' '.join(str(exc).split())[:300]}") from exc
        self.uploaded += 1
        kept = "kept on disk"
        if not self.config.keep_local:
            try:
                path.unlink()
                kept = "removed from disk"
            except OSError as exc:
                kept = f"not removed from disk: {exc}"
        log.info("[%s] recording stored at %s (%d bytes, %s; %s)", path.stem, url, size, self.config.encryption, kept)
        return url

    def _put(self, path: Path, key: str) -> None:
        from boto3.s3.transfer import TransferConfig

        part = self.config.part_size_bytes
        extra = {"ServerSideEncryption": self.config.encryption,
                 "ContentType": _MEDIA_BY_SUFFIX.get(path.suffix, "application/octet-stream")}
        if self.config.kms_key_id:
            extra["SSEKMSKeyId"] = self.config.kms_key_id
        self.client.upload_file(str(path), self.config.bucket, key, ExtraArgs=extra, Config=TransferConfig(
            multipart_threshold=part, multipart_chunksize=part, use_threads=False))

    def _differs(self, key: str, size: int, etag: str | None, *, unreadable_is_missing: bool) -> str | None:
        """None when the object at ``key`` is the file (size, ETag, encryption); else how it is not.
        S3 answers a HEAD on a missing key 403 to a role without ListBucket: before an upload
        (``unreadable_is_missing``) that is taken as no object; after it, it raises."""
        from botocore.exceptions import ClientError

        missing = ("404", "NoSuchKey", "NotFound") + (("403", "Forbidden", "AccessDenied") if unreadable_is_missing else ())
        try:
            head = self.client.head_object(Bucket=self.config.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in missing:
                return "no object"
            raise
        if head.get("ContentLength") != size:
            return f"the object has {head.get('ContentLength')} bytes, the file {size}"
        stored_etag = str(head.get("ETag", "")).strip('"')
        if etag is not None and stored_etag != etag:
            return f"its ETag {stored_etag} is not the file's {etag}"
        if head.get("ServerSideEncryption") != self.config.encryption:
            return f"it is encrypted {head.get('ServerSideEncryption')!r}, not {self.config.encryption!r}"
        return None

    # -- reading back -------------------------------------------------------------------------

    def holds(self, url: str) -> bool:
        """Whether ``url`` is in this uploader's bucket and prefix (what the server may read)."""
        try:
            bucket, key = split_s3_url(url)
        except ValueError:
            return False
        return bucket == self.config.bucket and key.startswith(self.config.prefix) and ".." not in key.split("/")

    def read(self, url: str, byte_range: str | None = None) -> dict[str, Any]:
        """S3's GetObject answer for ``url`` (``Body`` a stream; ``ContentRange`` with a range).
        Raises RecordingUploadError when it cannot be read."""
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3_url(url)
        try:
            return self.client.get_object(Bucket=bucket, Key=key, **({"Range": byte_range} if byte_range else {}))
        except (BotoCoreError, ClientError) as exc:
            raise RecordingUploadError(f"{url}: {' '.join(str(exc).split())[:300]}") from exc
