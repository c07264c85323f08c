"""What ``parley deploy`` does against AWS: checks, then the requests of :mod:`deploy.aws.requests`
in order, waiting where AWS must finish first, with a line of progress for each step.

Every botocore exception is translated here, once, into :mod:`deploy.errors` (the command line
prints one line). A dry run makes only read-only calls (describe, list) and prints the rest.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from deploy.errors import (AwsError, DeploymentFailedError, EndpointNotFoundError, InstanceTypeError, NetworkError,
                           NotSubscribedError, RolledBackError)

from . import requests as rq
from .spec import Autoscaling, DeploymentSpec

BUSY = ("Creating", "Updating", "SystemUpdating", "RollingBack")
REVISION_RE = r"\d{8}-\d{6}"


@dataclass(frozen=True, slots=True)
class Call:
    """One AWS request: the boto3 client, its method, the exact parameters, and why."""

    service: str
    operation: str
    request: dict[str, Any]
    why: str

    @property
    def name(self) -> str:
        """The operation as AWS's API reference names it: ``create_model`` -> ``CreateModel``."""
        return api_name(self.operation)

    def as_json(self) -> dict[str, Any]:
        """The request as AWS's API reference writes it, bytes as text."""
        request = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in self.request.items()}
        return {"service": self.service, "operation": self.name, "request": request, "why": self.why}


def api_name(operation: str) -> str:
    return "".join(part.title() for part in operation.split("_"))


@dataclass(slots=True)
class Clients:
    """The boto3 clients a deployment talks to (tests pass moto's or stubbed ones)."""

    sagemaker: Any
    runtime: Any
    autoscaling: Any
    cloudwatch: Any
    ec2: Any

    @classmethod
    def for_region(cls, region: str, runtime_url: str | None = None) -> "Clients":
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(region_name=region)
        retries = Config(retries={"mode": "standard", "max_attempts": 5}, read_timeout=120)
        return cls(sagemaker=session.client("sagemaker", config=retries),
                   runtime=session.client("sagemaker-runtime", endpoint_url=runtime_url, config=retries),
                   autoscaling=session.client("application-autoscaling", config=retries),
                   cloudwatch=session.client("cloudwatch", config=retries),
                   ec2=session.client("ec2", config=retries))

    def close(self) -> None:
        """Close the clients' connection pools."""
        for client in (self.sagemaker, self.runtime, self.autoscaling, self.cloudwatch, self.ec2):
            client.close()


@contextlib.contextmanager
def aws(operation: str) -> Iterator[None]:
    """Translate botocore's exceptions for one request into a :class:`AwsError` of one line."""
    from botocore.exceptions import (BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError,
                                     NoRegionError)

    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code, message = str(err.get("Code", "")), str(err.get("Message", exc))
        text = f"{operation}: {code}: {message}"
        if "subscri" in message.lower():
            raise NotSubscribedError(f"{text} (subscribe once on the listing's AWS Marketplace page, "
                                     f"'Continue to Subscribe', then run this again)", code) from exc
        if code in ("ValidationException", "ResourceNotFound") and "could not find endpoint" in message.lower():
            raise EndpointNotFoundError(text, code) from exc
        raise AwsError(text, code) from exc
    except NoCredentialsError as exc:
        raise AwsError(f"{operation}: no AWS credentials (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                       f"AWS_SECRET_ACCESS_KEY, or run on a host with a role)") from exc
    except NoRegionError as exc:
        raise AwsError(f"{operation}: no Region (--region, or region: in the deployment file)") from exc
    except EndpointConnectionError as exc:
        raise AwsError(f"{operation}: cannot reach AWS: {exc}") from exc
    except BotoCoreError as exc:
        raise AwsError(f"{operation}: {exc}") from exc


@dataclass
class Deployer:
    clients: Clients
    say: Callable[[str], None] = print
    poll_s: float = 30.0
    timeout_s: float = 3600.0
    sleep: Callable[[float], None] = time.sleep
    dry_run: bool = False
    done: list[Call] = field(default_factory=list)   # what was sent (or, in a dry run, would be)

    # ----------------------------------------------------------------- plumbing
    def _call(self, call: Call) -> dict[str, Any]:
        self.done.append(call)
        if self.dry_run:
            return {}
        self.say(f"  {call.name:<28} {call.why}")
        client = getattr(self.clients, call.service)
        with aws(call.name):
            return dict(getattr(client, call.operation)(**call.request))

    def _read(self, service: str, operation: str, **request: Any) -> dict[str, Any]:
        """A read-only request: made in a dry run too (it changes nothing)."""
        client = getattr(self.clients, service)
        with aws(api_name(operation)):
            return dict(getattr(client, operation)(**request))

    def describe_endpoint(self, name: str) -> dict[str, Any] | None:
        try:
            return self._read("sagemaker", "describe_endpoint", EndpointName=name)
        except AwsError as exc:
            if exc.code == "ValidationException" or isinstance(exc, EndpointNotFoundError):
                return None
            raise

    # ----------------------------------------------------------------- checks
    def check(self, spec: DeploymentSpec) -> list[str]:
        """What can be known before anything is created: the package exists, is subscribed and
        runs on the instance type; the VPC has a SageMaker runtime endpoint. Returns notes."""
        notes = []
        if spec.marketplace:
            pkg = self._read("sagemaker", "describe_model_package", ModelPackageName=spec.model_package_arn)
            supported = (pkg.get("InferenceSpecification") or {}).get("SupportedRealtimeInferenceInstanceTypes") or []
            if supported and spec.instance_type not in supported:
                raise InstanceTypeError(f"instance_type {spec.instance_type} is not one the package "
                                        f"{pkg.get('ModelPackageName', spec.model_package_arn)} supports for "
                                        f"real-time inference: {', '.join(sorted(supported))}")
            notes.append(f"model package {pkg.get('ModelPackageName', '?')} ({pkg.get('ModelPackageStatus', '?')}) "
                         f"runs on {spec.instance_type}")
        if spec.network.subnets:
            subnets = self._read("ec2", "describe_subnets", SubnetIds=list(spec.network.subnets))["Subnets"]
            vpcs = sorted({s["VpcId"] for s in subnets})
            zones = sorted({s["AvailabilityZone"] for s in subnets})
            if len(vpcs) != 1:
                raise NetworkError(f"network.subnets are in {len(vpcs)} VPCs ({', '.join(vpcs)}): give subnets of one")
            service = f"com.amazonaws.{spec.region}.sagemaker.runtime"
            found = self._read("ec2", "describe_vpc_endpoints", Filters=[
                {"Name": "vpc-id", "Values": vpcs}, {"Name": "service-name", "Values": [service]}])["VpcEndpoints"]
            live = [e for e in found if e.get("State", "available").lower() in ("available", "pending")]
            if not live:
                raise NetworkError(f"VPC {vpcs[0]} has no interface endpoint for {service}: the call tier could "
                                   f"not reach the models privately (deploy/aws/templates/parley-network.yaml "
                                   f"creates it; or aws ec2 create-vpc-endpoint --vpc-endpoint-type Interface "
                                   f"--service-name {service} --private-dns-enabled ...)")
            notes.append(f"VPC {vpcs[0]}: the SageMaker runtime is reached privately ({live[0]['VpcEndpointId']}); "
                         f"zones {', '.join(zones)}"
                         + (" (one zone: the tightest path, no zone redundancy)" if len(zones) == 1 else ""))
        else:
            notes.append("no network: the endpoint is reached over the public SageMaker runtime API (give "
                         "network.subnets and security_groups for a private one)")
        return notes

    # ----------------------------------------------------------------- plans
    def create_calls(self, spec: DeploymentSpec, revision: str) -> list[Call]:
        calls = [Call("sagemaker", "create_model", rq.model_request(spec, revision),
                      "the model: " + ("the Marketplace package, network-isolated" if spec.marketplace
                                       else f"{spec.image}, weights from {spec.model_data or 'the image'}")),
                 Call("sagemaker", "create_endpoint_config", rq.endpoint_config_request(spec, revision),
                      f"{spec.instances} x {spec.instance_type}, least-outstanding-requests routing")]
        calls += [Call("cloudwatch", "put_metric_alarm", a, "alarm: " + a["AlarmName"])
                  for a in rq.alarm_requests(spec)]
        calls += [Call("sagemaker", "create_endpoint", rq.endpoint_request(spec, revision),
                       "the endpoint (rolling updates roll back on those alarms)")]
        calls += self._scaling_calls(spec.name, spec.variant, spec.autoscaling)
        return calls

    @staticmethod
    def _scaling_calls(name: str, variant: str, a: Autoscaling) -> list[Call]:
        return [Call("autoscaling", "register_scalable_target", rq.scalable_target_request(name, variant, a),
                     f"autoscaling between {a.min} and {a.max} instances"),
                Call("autoscaling", "put_scaling_policy", rq.scaling_policy_request(name, variant, a),
                     f"target {a.target_concurrency} open streams per instance")]

    # ----------------------------------------------------------------- commands
    def create(self, spec: DeploymentSpec, revision: str) -> list[Call]:
        """Checks, then every request in order; a dry run asks AWS nothing and sends nothing."""
        if not self.dry_run:
            existing = self.describe_endpoint(spec.name)
            if existing is not None:
                raise AwsError(f"endpoint {spec.name} exists ({existing['EndpointStatus']}): parley deploy update "
                               f"changes it, parley deploy delete removes it")
            for note in self.check(spec):
                self.say(f"  ok: {note}")
        calls = self.create_calls(spec, revision)
        for call in calls:
            if call.service == "autoscaling" and call.operation == "register_scalable_target" and not self.dry_run:
                self.wait(spec.name, want_config=rq.versioned(spec, revision))
            self._call(call)
        return calls

    def wait(self, name: str, want_config: str | None = None, old_config: str | None = None) -> dict[str, Any]:
        """Poll until the endpoint is no longer busy; a line each time its status changes."""
        t0 = time.monotonic()
        last = ""
        while True:
            desc = self.describe_endpoint(name)
            if desc is None:
                raise EndpointNotFoundError(f"endpoint {name} is gone")
            status = desc["EndpointStatus"]
            counts = ", ".join(f"{v['VariantName']} {v.get('CurrentInstanceCount', '?')}/"
                               f"{v.get('DesiredInstanceCount', '?')}" for v in desc.get("ProductionVariants", []))
            line = f"{status}" + (f" ({counts} instances)" if counts else "")
            if line != last:
                self.say(f"  [{time.monotonic() - t0:5.0f} s] {name}: {line}")
                last = line
            if status not in BUSY:
                break
            if time.monotonic() - t0 > self.timeout_s:
                raise DeploymentFailedError(f"endpoint {name} still {status} after {self.timeout_s:.0f} s")
            self.sleep(self.poll_s)
        reason = desc.get("FailureReason", "")
        if status == "Failed":
            raise DeploymentFailedError(f"endpoint {name} failed: {reason or 'no reason given'}")
        if status == "UpdateRollbackFailed":
            raise DeploymentFailedError(f"endpoint {name}: the update failed and so did its rollback: {reason}")
        if want_config and desc.get("EndpointConfigName") != want_config:
            if old_config and desc.get("EndpointConfigName") == old_config:
                raise RolledBackError(f"the update to {want_config} was rolled back; {old_config} still serves"
                                      + (f": {reason}" if reason else ""))
            raise DeploymentFailedError(f"endpoint {name} serves {desc.get('EndpointConfigName')}, not {want_config}")
        return desc

    def update(self, spec: DeploymentSpec, revision: str) -> list[Call]:
        """A new model and config, then a rolling update watched by the alarms. With the same
        instance type autoscaling stays on and the instance count it set is kept; a new type
        takes autoscaling off for the update (AWS requires it) and puts it back after."""
        desc = self.describe_endpoint(spec.name)
        if desc is None:
            raise EndpointNotFoundError(f"no endpoint {spec.name} in {spec.region}: parley deploy create makes it")
        if desc["EndpointStatus"] != "InService":
            raise AwsError(f"endpoint {spec.name} is {desc['EndpointStatus']}: an update starts from InService "
                           f"(parley deploy status)")
        old_config = desc["EndpointConfigName"]
        current = self._read("sagemaker", "describe_endpoint_config", EndpointConfigName=old_config)
        old_variant = next((v for v in current["ProductionVariants"] if v["VariantName"] == spec.variant), None)
        if old_variant is None:
            raise AwsError(f"endpoint {spec.name} has no variant {spec.variant!r}")
        desired = next((v.get("DesiredInstanceCount") for v in desc.get("ProductionVariants", [])
                        if v["VariantName"] == spec.variant), None) or spec.instances
        same_type = old_variant.get("InstanceType") == spec.instance_type
        for note in self.check(spec):
            self.say(f"  ok: {note}")
        scaling = self._read("autoscaling", "describe_scalable_targets", ServiceNamespace="sagemaker",
                             ResourceIds=[rq.resource_id(spec.name, spec.variant)])["ScalableTargets"]
        pause_scaling = bool(scaling) and not same_type
        calls = [Call("sagemaker", "create_model", rq.model_request(spec, revision), "the new model"),
                 Call("sagemaker", "create_endpoint_config",
                      rq.endpoint_config_request(spec, revision, instances=max(desired, spec.instances)),
                      f"{max(desired, spec.instances)} x {spec.instance_type}")]
        calls += [Call("cloudwatch", "put_metric_alarm", a, "alarm: " + a["AlarmName"]) for a in rq.alarm_requests(spec)]
        if pause_scaling:
            calls += [Call("autoscaling", "delete_scaling_policy",
                           {"PolicyName": rq.scaling_policy_name(spec.name),
                            **rq.scalable_target_key(spec.name, spec.variant)},
                           f"autoscaling off: the instance type changes ({old_variant.get('InstanceType')} -> "
                           f"{spec.instance_type})"),
                      Call("autoscaling", "deregister_scalable_target",
                           rq.scalable_target_key(spec.name, spec.variant), "(AWS refuses the update otherwise)")]
        calls.append(Call("sagemaker", "update_endpoint", rq.update_request(spec, revision, retain_counts=same_type),
                          f"rolling update from {old_config}, {spec.rollout.batch_instances} instance(s) at a time"))
        after = self._scaling_calls(spec.name, spec.variant, spec.autoscaling) if pause_scaling else []
        if self.dry_run:
            for call in calls + after:
                self._call(call)
            return calls + after
        try:
            for call in calls:
                self._call(call)
            self.wait(spec.name, want_config=rq.versioned(spec, revision), old_config=old_config)
        finally:
            if after and self.describe_endpoint(spec.name) is not None:
                self.wait(spec.name)
                for call in after:
                    self._call(call)
        return calls + after

    def scale(self, name: str, variant: str, a: Autoscaling, instances: int | None = None) -> list[Call]:
        if self.describe_endpoint(name) is None:
            raise EndpointNotFoundError(f"no endpoint {name}: parley deploy create makes it")
        calls = self._scaling_calls(name, variant, a)
        if instances is not None:
            calls.append(Call("sagemaker", "update_endpoint_weights_and_capacities",
                              {"EndpointName": name, "DesiredWeightsAndCapacities": [
                                  {"VariantName": variant, "DesiredInstanceCount": instances}]},
                              f"{instances} instances now (autoscaling keeps it within {a.min}..{a.max})"))
        for call in calls:
            self._call(call)
        return calls

    def status(self, name: str) -> dict[str, Any]:
        desc = self.describe_endpoint(name)
        if desc is None:
            raise EndpointNotFoundError(f"no endpoint {name}")
        config = self._read("sagemaker", "describe_endpoint_config", EndpointConfigName=desc["EndpointConfigName"])
        alarms = self._read("cloudwatch", "describe_alarms", AlarmNames=rq.alarm_names(name))["MetricAlarms"]
        variants = []
        for v in desc.get("ProductionVariants", []):
            rid = rq.resource_id(name, v["VariantName"])
            targets = self._read("autoscaling", "describe_scalable_targets", ServiceNamespace="sagemaker",
                                 ResourceIds=[rid])["ScalableTargets"]
            policies = self._read("autoscaling", "describe_scaling_policies", ServiceNamespace="sagemaker",
                                  ResourceId=rid)["ScalingPolicies"]
            cfg: dict[str, Any] = next((c for c in config["ProductionVariants"]
                                        if c["VariantName"] == v["VariantName"]), {})
            target_value = next((p["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] for p in policies
                                 if p.get("PolicyType") == "TargetTrackingScaling"), None)
            variants.append({"variant": v["VariantName"], "instance_type": cfg.get("InstanceType"),
                             "instances": v.get("CurrentInstanceCount"), "desired": v.get("DesiredInstanceCount"),
                             "model": cfg.get("ModelName"),
                             "autoscaling": ({"min": targets[0]["MinCapacity"], "max": targets[0]["MaxCapacity"],
                                              "target_concurrency": target_value} if targets else None)})
        last = desc.get("LastDeploymentConfig") or {}
        return {"endpoint": name, "status": desc["EndpointStatus"], "config": desc["EndpointConfigName"],
                "failure_reason": desc.get("FailureReason"), "variants": variants,
                "last_deployment": ("rolling" if "RollingUpdatePolicy" in last else
                                    "blue/green" if "BlueGreenUpdatePolicy" in last else None),
                "rollback_alarms": [a["AlarmName"] for a in
                                    (last.get("AutoRollbackConfiguration") or {}).get("Alarms", [])],
                "alarms": {a["AlarmName"]: a["StateValue"] for a in alarms},
                "updated": str(desc.get("LastModifiedTime", ""))}

    def delete(self, name: str) -> list[Call]:
        """The endpoint, then every model and config of the deployment (each revision), its
        alarms and its autoscaling."""
        desc = self.describe_endpoint(name)
        calls: list[Call] = []
        pattern = re.compile(rf"^{re.escape(name)}-{REVISION_RE}$")
        if desc is not None:
            for v in desc.get("ProductionVariants", []):
                rid = rq.resource_id(name, v["VariantName"])
                if self._read("autoscaling", "describe_scalable_targets", ServiceNamespace="sagemaker",
                              ResourceIds=[rid])["ScalableTargets"]:
                    calls.append(Call("autoscaling", "deregister_scalable_target",
                                      rq.scalable_target_key(name, v["VariantName"]), "autoscaling off"))
            calls.append(Call("sagemaker", "delete_endpoint", {"EndpointName": name}, "the endpoint (its instances)"))
        configs = self._read("sagemaker", "list_endpoint_configs", NameContains=name, MaxResults=100)["EndpointConfigs"]
        models = self._read("sagemaker", "list_models", NameContains=name, MaxResults=100)["Models"]
        calls += [Call("sagemaker", "delete_endpoint_config", {"EndpointConfigName": c["EndpointConfigName"]},
                       "an endpoint config") for c in configs if pattern.match(c["EndpointConfigName"])]
        calls += [Call("sagemaker", "delete_model", {"ModelName": m["ModelName"]}, "a model")
                  for m in models if pattern.match(m["ModelName"])]
        alarms = self._read("cloudwatch", "describe_alarms", AlarmNames=rq.alarm_names(name))["MetricAlarms"]
        if alarms:
            calls.append(Call("cloudwatch", "delete_alarms", {"AlarmNames": [a["AlarmName"] for a in alarms]},
                              "its alarms"))
        if not calls:
            raise EndpointNotFoundError(f"nothing of a deployment {name} to delete")
        for call in calls:
            self._call(call)
        return calls


@dataclass(frozen=True, slots=True)
class InvokeResult:
    first_audio_ms: float
    total_ms: float
    chunks: int
    pcm: bytes                    # 16-bit little-endian mono at the requested rate
    sample_rate_hz: int

    @property
    def audio_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate_hz


def invoke(clients: Clients, endpoint: str, text: str, sample_rate_hz: int = 8000, voice: str = "default",
           clock: Callable[[], float] = time.perf_counter) -> InvokeResult:
    """Speak one sentence through InvokeEndpointWithResponseStream and time its first audio."""
    request = rq.invoke_request(endpoint, text, sample_rate_hz, voice)
    t0 = clock()
    with aws("InvokeEndpointWithResponseStream"):
        response = clients.runtime.invoke_endpoint_with_response_stream(**request)
        stream = response["Body"]
        try:
            pcm, chunks, first, done = _read_events(stream, clock)
        finally:
            stream.close()          # a stream left midway keeps its connection otherwise
    if not done:
        raise AwsError("the endpoint's stream ended before its done event")
    if first is None:
        raise AwsError("the endpoint sent no audio")
    return InvokeResult(first_audio_ms=(first - t0) * 1000, total_ms=(clock() - t0) * 1000, chunks=chunks,
                        pcm=bytes(pcm), sample_rate_hz=sample_rate_hz)


def _read_events(stream: Any, clock: Callable[[], float]) -> tuple[bytearray, int, float | None, bool]:
    """The NDJSON events of a response stream: audio chunks, then done (or an error)."""
    pending = b""
    pcm = bytearray()
    chunks, first, done = 0, None, False
    for event in stream:
        if "PayloadPart" not in event:
            kind, body = next(iter(event.items()))
            raise AwsError(f"the endpoint's stream failed ({kind}): {body.get('Message', body)}", kind)
        pending += event["PayloadPart"]["Bytes"]
        *lines, pending = pending.split(b"\n")
        for line in filter(None, (raw.strip() for raw in lines)):
            try:
                msg = json.loads(line)
            except ValueError:
                raise AwsError(f"the endpoint sent a line that is not JSON: {line[:80]!r}") from None
            kind = msg.get("type")
            if kind == "chunk" and msg.get("data"):
                if first is None:
                    first = clock()
                pcm += base64.b64decode(msg["data"])
                chunks += 1
            elif kind == "error":
                raise AwsError(f"the model answered an error: {msg.get('error') or msg.get('message') or msg}")
            elif kind == "done":
                done = True
    return pcm, chunks, first, done
