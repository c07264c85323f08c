"""``sagemaker://`` model URLs: which SageMaker endpoint a call server streams its speech models to.

    sagemaker://parley-models                                   Region from AWS_REGION / the profile
    sagemaker://parley-models?region=eu-west-1
    sagemaker://parley-models?region=us-east-1&variant=AllTraffic
    sagemaker://parley-models?region=us-east-1&endpoint_url=https://vpce-0abc.runtime.sagemaker.us-east-1.vpce.amazonaws.com

``endpoint_url`` is for an interface VPC endpoint without private DNS (or a test stand-in); by
default the SDK's regional endpoint (``runtime.sagemaker.REGION.amazonaws.com:8443``) is used,
which private DNS on the ``sagemaker.runtime`` VPC endpoint keeps on the private network.

Standard library only: both the call server (Python 3.11, torch) and the bridge process (Python
3.12, AWS's HTTP/2 client) read these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from deploy.errors import ModelUrlError

__all__ = ["SCHEME", "Target", "is_sagemaker_url"]

SCHEME = "sagemaker"
_ENDPOINT = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")   # SageMaker's EndpointName pattern
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_KEYS = ("region", "variant", "endpoint_url")


def is_sagemaker_url(url: str) -> bool:
    return url.strip().lower().startswith(f"{SCHEME}://")


@dataclass(frozen=True)
class Target:
    """One endpoint the bridge streams to. ``region`` None: the SDK's own resolution (AWS_REGION,
    AWS_DEFAULT_REGION, the profile), checked when the bridge starts."""

    endpoint: str
    region: str | None = None
    variant: str | None = None
    endpoint_url: str | None = None

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url.strip())
        if parts.scheme.lower() != SCHEME:
            raise ModelUrlError(f"model URL {url!r}: expected sagemaker://ENDPOINT[?region=REGION]")
        name = parts.netloc + parts.path.rstrip("/")
        if not _ENDPOINT.match(name):
            raise ModelUrlError(f"model URL {url!r}: {name!r} is not a SageMaker endpoint name "
                                "(letters, digits and hyphens, at most 63)")
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(set(query) - set(_KEYS))
        if unknown:
            raise ModelUrlError(f"model URL {url!r}: unknown parameter {unknown[0]!r} "
                                f"(known: {', '.join(_KEYS)})")
        region = query.get("region") or None
        if region is not None and not _REGION.match(region):
            raise ModelUrlError(f"model URL {url!r}: {region!r} is not an AWS Region (like us-east-1)")
        endpoint_url = query.get("endpoint_url") or None
        if endpoint_url is not None and urlsplit(endpoint_url).scheme != "https":
            raise ModelUrlError(f"model URL {url!r}: endpoint_url must be https:// (SageMaker's "
                                "bidirectional streams are HTTP/2 over TLS)")
        return cls(name, region, query.get("variant") or None, endpoint_url)

    def url(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in (("region", self.region), ("variant", self.variant),
                                                 ("endpoint_url", self.endpoint_url)) if v)
        return f"{SCHEME}://{self.endpoint}" + (f"?{query}" if query else "")
