"""A deployment of parley's speech models on SageMaker, as a small file a person writes.

```yaml
name: parley-voice                  # the endpoint; models and configs get name-REVISION
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/parley-sagemaker
source:                             # one of the two:
  model_package_arn: arn:aws:sagemaker:us-east-1:865070037744:model-package/sonic-...
  # image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/parley-model-server:0.1.0
  # model_data: s3://bucket/parley-models/      (a prefix, or a .tar.gz; else the image's own)
instance_type: ml.g6e.xlarge
instances: 2                        # at least 2: an instance can leave at any time
autoscaling: {min: 2, max: 8, target_concurrency: 24}
network: {subnets: [subnet-0abc], security_groups: [sg-0abc]}
alarms: {first_byte_p99_ms: 800, model_latency_p99_ms: 250, errors_5xx: 5}
```

:func:`load_spec` reads it (YAML or TOML), :meth:`DeploymentSpec.with_overrides` lays the command
line's flags over it, and every field is checked once, here, with the field named in the error.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from deploy.errors import DeploymentSpecError

NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,40}$")  # leaves room for -REVISION in 63 chars
PACKAGE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:sagemaker:([a-z0-9-]+):\d{12}:model-package/[\w.\-/]+$")
ROLE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/\-]+$")
IMAGE_RE = re.compile(r"^[\w.\-]+(:\d+)?/[\w.\-/]+(:[\w.\-]+|@sha256:[0-9a-f]{64})$")
INSTANCE_RE = re.compile(r"^ml\.[a-z0-9]+\.[a-z0-9]+$")
REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")


@dataclass(frozen=True, slots=True)
class Autoscaling:
    """Target tracking on concurrent requests (open streams) per instance."""

    min: int = 2
    max: int = 8
    target_concurrency: int = 24       # streams per instance the policy steers to (bench_model_server)
    scale_in_cooldown_s: int = 600     # slow in: an instance leaving moves its streams
    scale_out_cooldown_s: int = 60


@dataclass(frozen=True, slots=True)
class Network:
    """Where the endpoint's instances sit: private subnets, and the groups the call tier may reach."""

    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rollout:
    """A rolling update: one batch of instances at a time, watched by the alarms."""

    batch_instances: int = 1
    wait_s: int = 300                  # how long each batch serves, alarms watching, before the next
    timeout_s: int = 3600
    rollback_batch_instances: int = 2


@dataclass(frozen=True, slots=True)
class Alarms:
    """The thresholds of the alarms that roll an update back (and page a person)."""

    first_byte_p99_ms: float = 800.0   # the call tier's end of speech -> first byte to the caller
    model_latency_p99_ms: float = 250.0  # SageMaker's ModelLatency, p99
    errors_5xx: int = 5                # Invocation5XXErrors per minute


@dataclass(frozen=True, slots=True)
class DeploymentSpec:
    name: str
    region: str
    role_arn: str
    model_package_arn: str = ""
    image: str = ""
    model_data: str = ""
    instance_type: str = "ml.g6e.xlarge"
    instances: int = 2
    variant: str = "primary"
    health_check_timeout_s: int = 600  # ContainerStartupHealthCheckTimeoutInSeconds: load + warm inference
    model_download_timeout_s: int = 1200
    metrics_publish_s: int = 10        # the container's /metrics scraped into CloudWatch this often
    autoscaling: Autoscaling = field(default_factory=Autoscaling)
    network: Network = field(default_factory=Network)
    rollout: Rollout = field(default_factory=Rollout)
    alarms: Alarms = field(default_factory=Alarms)
    environment: tuple[tuple[str, str], ...] = ()
    tags: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        def bad(field_name: str, why: str) -> DeploymentSpecError:
            return DeploymentSpecError(f"{field_name}: {why}")

        if not NAME_RE.match(self.name):
            raise bad("name", f"{self.name!r} is not an endpoint name (letters, digits and hyphens, <= 41)")
        if not REGION_RE.match(self.region):
            raise bad("region", f"{self.region!r} is not a Region (for example us-east-1)")
        if not ROLE_ARN_RE.match(self.role_arn):
            raise bad("role_arn", f"{self.role_arn!r} is not an IAM role ARN (SageMaker assumes it to run the model)")
        if bool(self.model_package_arn) == bool(self.image):
            raise bad("source", "give model_package_arn (a Marketplace package) or image (parley's model "
                                "server), one of the two")
        if self.model_package_arn:
            m = PACKAGE_ARN_RE.match(self.model_package_arn)
            if not m:
                raise bad("model_package_arn", f"{self.model_package_arn!r} is not a model package ARN")
            if m.group(1) != self.region:
                raise bad("model_package_arn", f"the package is in {m.group(1)}, the deployment in {self.region}: "
                                               f"Marketplace packages have one ARN per Region; use the "
                                               f"{self.region} one from the listing's launch page")
            if self.model_data:
                raise bad("model_data", "a Marketplace package carries its own weights")
        if self.image and not IMAGE_RE.match(self.image):
            raise bad("image", f"{self.image!r} is not an image URI with a tag or digest (ECR: ACCOUNT.dkr.ecr."
                               f"REGION.amazonaws.com/REPO:TAG)")
        if self.model_data and not self.model_data.startswith("s3://"):
            raise bad("model_data", f"{self.model_data!r}: SageMaker endpoints load weights from S3 (s3://bucket/"
                                    f"prefix/ or a .tar.gz) or from the image; they cannot mount EFS or FSx")
        if not INSTANCE_RE.match(self.instance_type):
            raise bad("instance_type", f"{self.instance_type!r} is not a SageMaker instance type (ml.g6e.xlarge)")
        if self.instances < 2:
            raise bad("instances", f"{self.instances}: at least 2, so an instance leaving (an update, a scale-in, "
                                   f"a failure) never leaves calls without a model")
        a = self.autoscaling
        if not 2 <= a.min <= a.max:
            raise bad("autoscaling", f"min {a.min}, max {a.max}: need 2 <= min <= max")
        if not a.min <= self.instances <= a.max:
            raise bad("instances", f"{self.instances} is outside autoscaling's {a.min}..{a.max}")
        if a.target_concurrency < 1:
            raise bad("autoscaling.target_concurrency", "at least 1 stream per instance")
        if bool(self.network.subnets) != bool(self.network.security_groups):
            raise bad("network", "subnets and security_groups go together (a VpcConfig needs both)")
        r = self.rollout
        if not 1 <= r.batch_instances < self.instances:
            raise bad("rollout.batch_instances", f"{r.batch_instances}: between 1 and instances - 1, so some "
                                                 f"instances of the serving version stay up through the update")
        if self.metrics_publish_s not in (10, 30, 60, 120, 180, 240, 300):
            raise bad("metrics_publish_s", f"{self.metrics_publish_s}: one of 10, 30, 60, 120, 180, 240, 300")

    @property
    def marketplace(self) -> bool:
        return bool(self.model_package_arn)

    def with_overrides(self, **flags: Any) -> "DeploymentSpec":
        """The spec with the command line's flags laid over it (a flag left at None changes nothing)."""
        top = {k: v for k, v in flags.items() if v is not None and k in _TOP_FIELDS}
        if flags.get("model_package_arn"):
            top.update(image="", model_data="")
        if flags.get("image"):
            top["model_package_arn"] = ""
        try:
            return replace(self, **top)
        except TypeError as exc:
            raise DeploymentSpecError(str(exc)) from None


_TOP_FIELDS = {f.name for f in fields(DeploymentSpec)} - {"autoscaling", "network", "rollout", "alarms"}


def _section(cls: type, raw: Any, where: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise DeploymentSpecError(f"{where}: a table of settings, not {type(raw).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise DeploymentSpecError(f"{where}: unknown setting {unknown[0]!r} (known: {', '.join(sorted(known))})")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    try:
        return cls(**values)
    except TypeError as exc:
        raise DeploymentSpecError(f"{where}: {exc}") from None


def spec_from_dict(raw: dict[str, Any]) -> DeploymentSpec:
    raw = dict(raw)
    source = raw.pop("source", None) or {}
    if not isinstance(source, dict):
        raise DeploymentSpecError("source: a table with model_package_arn, or image (and model_data)")
    unknown = sorted(set(source) - {"model_package_arn", "image", "model_data"})
    if unknown:
        raise DeploymentSpecError(f"source: unknown setting {unknown[0]!r}")
    sections = {"autoscaling": Autoscaling, "network": Network, "rollout": Rollout, "alarms": Alarms}
    values: dict[str, Any] = {k: _section(cls, raw.pop(k, None), k) for k, cls in sections.items()}
    for key in ("environment", "tags"):
        table = raw.pop(key, None) or {}
        if not isinstance(table, dict):
            raise DeploymentSpecError(f"{key}: a table of names and values")
        values[key] = tuple((str(k), str(v)) for k, v in table.items())
    unknown = sorted(set(raw) - _TOP_FIELDS)
    if unknown:
        raise DeploymentSpecError(f"unknown setting {unknown[0]!r} (known: {', '.join(sorted(_TOP_FIELDS))}, "
                                  f"source, autoscaling, network, rollout, alarms)")
    missing = [k for k in ("name", "region", "role_arn") if k not in raw]
    if missing:
        raise DeploymentSpecError(f"{missing[0]}: required")
    try:
        return DeploymentSpec(**raw, **source, **values)
    except TypeError as exc:
        raise DeploymentSpecError(str(exc)) from None


def load_spec(path: Path) -> DeploymentSpec:
    """Read a deployment file: ``.yaml``/``.yml`` or ``.toml``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise DeploymentSpecError(f"{path}: {exc.strerror or exc}") from None
    try:
        raw = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise DeploymentSpecError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: "
                                  f"{str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise DeploymentSpecError(f"{path}: a table of settings at the top")
    try:
        return spec_from_dict(raw)
    except DeploymentSpecError as exc:
        raise DeploymentSpecError(f"{path}: {exc}") from None
