"""Where call recordings go after the call: an Amazon S3 bucket and prefix, and their encryption.

    s3 = RecordingsS3Config.parse("s3://acme-calls/parley/")        # SSE-S3 (AES256)
    s3 = RecordingsS3Config.parse("s3://acme-calls/parley", kms_key_id="alias/calls", keep_local=True)
    s3.key_for("2026-12-07/CA123.opus")    # "parley/2026-12-07/CA123.opus"
    s3.url_for(key)                         # "s3://acme-calls/parley/2026-12-07/CA123.opus"
    split_s3_url("s3://acme-calls/k")       # ("acme-calls", "k"), or raises ConfigError

The configuration only (no boto3): ``PipelineConfig.recordings_s3`` carries it to every call, and
``telephony.core.uploads`` does the uploads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.errors import ConfigError

__all__ = ["MIN_PART_SIZE_BYTES", "RecordingsS3Config", "split_s3_url"]

MIN_PART_SIZE_BYTES = 5 * 1024 * 1024   # S3's smallest part of a multipart upload (but the last)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://BUCKET/KEY`` as ``(BUCKET, KEY)``; the key may be empty."""
    if not url.startswith("s3://"):
        raise ConfigError(f"not an s3:// URL: {url!r}")
    bucket, _, key = url[len("s3://"):].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ConfigError(f"{url!r}: {bucket!r} is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-')")
    return bucket, key


@dataclass(frozen=True)
class RecordingsS3Config:
    bucket: str
    prefix: str = ""                      # "" or ending in "/"
    kms_key_id: str | None = None         # SSE-KMS with this key (id, ARN or alias); None: SSE-S3 (AES256)
    keep_local: bool = False              # keep the file on disk after a verified upload
    part_size_bytes: int = 8 * 1024 * 1024   # multipart above this, in parts of this size
    region: str | None = None             # None: boto3's (AWS_REGION, the profile, the instance)

    def __post_init__(self) -> None:
        split_s3_url(f"s3://{self.bucket}/")
        if self.prefix and not self.prefix.endswith("/"):
            raise ConfigError(f"the recordings' S3 prefix must end in '/', not {self.prefix!r}")
        if self.part_size_bytes < MIN_PART_SIZE_BYTES:
            raise ConfigError(f"part_size_bytes {self.part_size_bytes} is below S3's minimum part "
                              f"({MIN_PART_SIZE_BYTES} bytes)")
        if self.kms_key_id is not None and not self.kms_key_id.strip():
            raise ConfigError("an empty KMS key id: leave it out for SSE-S3")

    @classmethod
    def parse(cls, url: str, **options: object) -> RecordingsS3Config:
        """``s3://BUCKET[/PREFIX]`` (a prefix gets its trailing '/'); ``options`` as the fields."""
        bucket, prefix = split_s3_url(url)
        prefix = prefix.strip("/")
        return cls(bucket=bucket, prefix=f"{prefix}/" if prefix else "", **options)  # type: ignore[arg-type]

    @property
    def encryption(self) -> str:
        """S3's ``ServerSideEncryption``: ``aws:kms`` or ``AES256``."""
        return "aws:kms" if self.kms_key_id else "AES256"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key_for(self, relative: str) -> str:
        """The object key of a recording at ``relative`` (a '/'-separated path under the folder)."""
        return f"{self.prefix}{relative.lstrip('/')}"

    def url_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"
