"""The exact AWS requests a deployment makes, as plain dicts: what ``--dry-run`` prints and what
:mod:`deploy.aws.operations` sends. Pure functions of a :class:`DeploymentSpec` and a revision, so
a reviewer (and a test) can read every request against AWS's API reference.

Names: the endpoint is ``spec.name``; each model and endpoint config is ``NAME-REVISION``
(``parley-voice-20261202-231500``), so an update creates new ones beside the serving ones and a
rollback has the old ones to go back to.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .spec import Autoscaling, DeploymentSpec

METRIC_NAMESPACE = "Parley"            # the call tier's own metrics (EMF log lines; telephony.emf)
FIRST_BYTE_METRIC = "FirstByteMs"      # end of caller speech -> first agent audio byte on the wire
LIVE_CALLS_METRIC = "LiveCalls"
DROPPED_FRAMES_METRIC = "DroppedFrames"
DEPLOYMENT_DIMENSION = "Deployment"    # the call tier tags its metrics with the deployment it uses
SCALING_METRIC = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
MODEL_DIR = "/opt/ml/model"


def revision_now() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def versioned(spec: DeploymentSpec, revision: str) -> str:
    return f"{spec.name}-{revision}"


def _tags(spec: DeploymentSpec) -> list[dict[str, str]]:
    return [{"Key": "parley:deployment", "Value": spec.name}] + [{"Key": k, "Value": v} for k, v in spec.tags]


def model_request(spec: DeploymentSpec, revision: str) -> dict[str, Any]:
    """CreateModel: a Marketplace package (network isolation, as Marketplace requires) or parley's
    image with its weights from S3 and its Prometheus /metrics scraped into CloudWatch."""
    container: dict[str, Any]
    if spec.marketplace:
        container = {"ModelPackageName": spec.model_package_arn}
    else:
        env = dict(spec.environment)
        container = {"Image": spec.image,
                     "ContainerMetricsConfig": {"MetricsEndpoints": [
                         {"MetricsEndpointPath": "/metrics", "MetricPublishFrequencyInSeconds": spec.metrics_publish_s}]}}
        if spec.model_data:
            env.setdefault("PARLEY_MODEL_DIR", MODEL_DIR)
            if spec.model_data.endswith(".tar.gz"):
                container["ModelDataUrl"] = spec.model_data
            else:  # an uncompressed prefix: no unpacking at start, the faster warm start
                container["ModelDataSource"] = {"S3DataSource": {
                    "S3Uri": spec.model_data.rstrip("/") + "/", "S3DataType": "S3Prefix", "CompressionType": "None"}}
        if env:
            container["Environment"] = env
    request: dict[str, Any] = {"ModelName": versioned(spec, revision), "PrimaryContainer": container,
                               "ExecutionRoleArn": spec.role_arn, "Tags": _tags(spec)}
    if spec.network.subnets:
        request["VpcConfig"] = {"SecurityGroupIds": list(spec.network.security_groups),
                                "Subnets": list(spec.network.subnets)}
    if spec.marketplace:
        request["EnableNetworkIsolation"] = True
    return request


def endpoint_config_request(spec: DeploymentSpec, revision: str, instances: int | None = None) -> dict[str, Any]:
    """CreateEndpointConfig: one variant of >= 2 instances, least-outstanding-requests routing (a
    new stream goes to the instance with the fewest open), a start-up health check long enough for
    the load and warm inference, detailed observability (the container's /metrics)."""
    variant = {
        "VariantName": spec.variant,
        "ModelName": versioned(spec, revision),
        "InitialInstanceCount": instances or spec.instances,
        "InstanceType": spec.instance_type,
        "InitialVariantWeight": 1.0,
        "ContainerStartupHealthCheckTimeoutInSeconds": spec.health_check_timeout_s,
        "ModelDataDownloadTimeoutInSeconds": spec.model_download_timeout_s,
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }
    return {"EndpointConfigName": versioned(spec, revision), "ProductionVariants": [variant],
            "MetricsConfig": {"EnableEnhancedMetrics": True, "EnableDetailedObservability": True,
                              "MetricPublishFrequencyInSeconds": spec.metrics_publish_s},
            "Tags": _tags(spec)}


def alarm_names(name: str) -> list[str]:
    return [f"{name}-first-byte-p99", f"{name}-model-latency-p99", f"{name}-5xx"]


def alarm_requests(spec: DeploymentSpec) -> list[dict[str, Any]]:
    """PutMetricAlarm, three: what callers feel (the call tier's first byte, p99), the model's own
    latency (p99) and server errors. An update rolls back when any fires."""
    first_byte, latency, errors = alarm_names(spec.name)
    endpoint_dims = [{"Name": "EndpointName", "Value": spec.name}, {"Name": "VariantName", "Value": spec.variant}]
    common = {"Period": 60, "EvaluationPeriods": 3, "DatapointsToAlarm": 2,
              "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching", "Tags": _tags(spec)}
    return [
        {"AlarmName": first_byte, **common,
         "AlarmDescription": f"p99 end of caller speech to first agent audio over {spec.alarms.first_byte_p99_ms:g} ms "
                             f"(the call tier's {FIRST_BYTE_METRIC})",
         "Namespace": METRIC_NAMESPACE, "MetricName": FIRST_BYTE_METRIC,
         "Dimensions": [{"Name": DEPLOYMENT_DIMENSION, "Value": spec.name}],
         "ExtendedStatistic": "p99", "Threshold": spec.alarms.first_byte_p99_ms, "Unit": "Milliseconds"},
        {"AlarmName": latency, **common,
         "AlarmDescription": f"p99 ModelLatency over {spec.alarms.model_latency_p99_ms:g} ms",
         "Namespace": "AWS/SageMaker", "MetricName": "ModelLatency", "Dimensions": endpoint_dims,
         "ExtendedStatistic": "p99", "Threshold": spec.alarms.model_latency_p99_ms * 1000.0,
         "Unit": "Microseconds"},
        {"AlarmName": errors, **common,
         "AlarmDescription": f"more than {spec.alarms.errors_5xx} model server errors (5xx) a minute",
         "Namespace": "AWS/SageMaker", "MetricName": "Invocation5XXErrors", "Dimensions": endpoint_dims,
         "Statistic": "Sum", "Threshold": float(spec.alarms.errors_5xx)},
    ]


def deployment_config(spec: DeploymentSpec) -> dict[str, Any]:
    """Rolling: one batch of instances at a time, each batch watched for ``rollout.wait_s``; any
    alarm rolls every batch back. The serving version keeps ``instances - batch`` instances up."""
    r = spec.rollout
    return {"RollingUpdatePolicy": {
                "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": r.batch_instances},
                "WaitIntervalInSeconds": r.wait_s,
                "MaximumExecutionTimeoutInSeconds": r.timeout_s,
                "RollbackMaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": r.rollback_batch_instances}},
            "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": n} for n in alarm_names(spec.name)]}}


def endpoint_request(spec: DeploymentSpec, revision: str) -> dict[str, Any]:
    return {"EndpointName": spec.name, "EndpointConfigName": versioned(spec, revision),
            "DeploymentConfig": deployment_config(spec), "Tags": _tags(spec)}


def update_request(spec: DeploymentSpec, revision: str, retain_counts: bool) -> dict[str, Any]:
    """UpdateEndpoint to the new config. ``retain_counts`` keeps the instance count autoscaling set
    (the same instance type: autoscaling stays registered through the update)."""
    request: dict[str, Any] = {"EndpointName": spec.name, "EndpointConfigName": versioned(spec, revision),
                               "DeploymentConfig": deployment_config(spec)}
    if retain_counts:
        request["RetainAllVariantProperties"] = True
    return request


def resource_id(name: str, variant: str) -> str:
    return f"endpoint/{name}/variant/{variant}"


def scalable_target_key(name: str, variant: str) -> dict[str, Any]:
    """What names a variant's scalable target in every Application Auto Scaling request."""
    return {"ServiceNamespace": "sagemaker", "ResourceId": resource_id(name, variant),
            "ScalableDimension": SCALABLE_DIMENSION}


def scalable_target_request(name: str, variant: str, a: Autoscaling) -> dict[str, Any]:
    return {**scalable_target_key(name, variant), "MinCapacity": a.min, "MaxCapacity": a.max}


def scaling_policy_name(name: str) -> str:
    return f"{name}-streams-per-instance"


def scaling_policy_request(name: str, variant: str, a: Autoscaling) -> dict[str, Any]:
    """Target tracking on concurrent requests per model copy, at high resolution (10 s): a
    bidirectional stream is one request for as long as it is open, so this is streams per instance."""
    return {"PolicyName": scaling_policy_name(name), **scalable_target_key(name, variant),
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": float(a.target_concurrency),
                "PredefinedMetricSpecification": {"PredefinedMetricType": SCALING_METRIC},
                "ScaleInCooldown": a.scale_in_cooldown_s, "ScaleOutCooldown": a.scale_out_cooldown_s}}


def invoke_request(endpoint: str, text: str, sample_rate_hz: int = 8000, voice: str = "default") -> dict[str, Any]:
    """InvokeEndpointWithResponseStream with one utterance in Cartesia's Marketplace shape, which
    parley's model server takes on /invocations too: NDJSON events come back."""
    body = {"model_id": "sonic", "transcript": text, "context_id": "parley-deploy-invoke",
            "voice": {"mode": "id", "id": voice},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": sample_rate_hz}}
    return {"EndpointName": endpoint, "Body": json.dumps(body).encode(), "ContentType": "application/json",
            "Accept": "application/jsonlines"}
