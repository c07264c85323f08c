"""``parley deploy`` end to end against stand-ins for AWS: moto where it implements the API
(models, endpoint configs, endpoints, alarms, autoscaling, VPCs), botocore's Stubber with exact
requests where it does not (UpdateEndpoint, rollbacks, Marketplace refusals), and a loopback
SageMaker runtime for response streaming in front of parley's real model server."""

from __future__ import annotations

import datetime as dt
import json
import re
import wave
from dataclasses import replace
from pathlib import Path

import botocore.session
import pytest
from botocore.stub import ANY, Stubber
from botocore.validate import ParamValidator

from deploy.aws import operations as ops
from deploy.aws import requests as rq
from deploy.aws.spec import Autoscaling, load_spec
from deploy.cli import main
from deploy.sagemaker_stream.targets import Target
from deploy.errors import DeploymentSpecError, InstanceTypeError, NetworkError, NotSubscribedError

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "aws" / "examples"
REGION = "us-east-1"
REV = "20261202-120000"
NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def aws_env(moto_env):
    assert REGION == "us-east-1"   # moto_env's region (tests/conftest.py)


@pytest.fixture
def moto_aws(aws_env):
    from moto import mock_aws

    with mock_aws():
        yield ops.Clients.for_region(REGION)


def _network(clients: ops.Clients, runtime_endpoint: bool = True) -> tuple[str, str]:
    ec2 = clients.ec2
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="parley-models", Description="models", VpcId=vpc)["GroupId"]
    if runtime_endpoint:
        ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.sagemaker.runtime",
                                VpcEndpointType="Interface", SubnetIds=[subnet])
    return subnet, group


def _own_spec(subnet: str, group: str, **changes):
    spec = load_spec(EXAMPLES / "parley-model-server.toml")
    spec = replace(spec, network=replace(spec.network, subnets=(subnet,), security_groups=(group,)))
    return replace(spec, **changes)


def _validate(call: ops.Call) -> None:
    """The request is one AWS's API model accepts (botocore's own validator, as a real call runs it)."""
    service = {"sagemaker": "sagemaker", "cloudwatch": "cloudwatch", "autoscaling": "application-autoscaling",
               "runtime": "sagemaker-runtime", "ec2": "ec2"}[call.service]
    model = botocore.session.get_session().get_service_model(service)
    op = model.operation_model(call.as_json()["operation"])
    report = ParamValidator().validate(call.request, op.input_shape)
    assert not report.has_errors(), report.generate_report()


# ------------------------------------------------------------------------ the deployment file
def test_examples_load_and_bad_files_name_the_field(tmp_path):
    marketplace = load_spec(EXAMPLES / "sonic-marketplace.yaml")
    own = load_spec(EXAMPLES / "parley-model-server.toml")
    assert marketplace.marketplace and not own.marketplace
    assert (own.instances, own.autoscaling.min, own.network.subnets) == (2, 2, ("subnet-0123456789abcdef0",))

    def bad(text: str, suffix: str = ".yaml") -> str:
        path = tmp_path / f"d{suffix}"
        path.write_text(text)
        with pytest.raises(DeploymentSpecError) as err:
            load_spec(path)
        return str(err.value)

    base = "name: v\nregion: us-east-1\nrole_arn: arn:aws:iam::123456789012:role/r\n"
    image = "source: {image: 1.dkr.ecr.us-east-1.amazonaws.com/p:1}\n"
    assert "instances: 1: at least 2" in bad(base + image + "instances: 1\n")
    assert "unknown setting 'replicas'" in bad(base + image + "replicas: 3\n")
    assert "one of the two" in bad(base)
    assert "package is in eu-west-1" in bad(base + "source: {model_package_arn: arn:aws:sagemaker:eu-west-1:"
                                                   "123456789012:model-package/sonic}\n")
    assert "cannot mount EFS" in bad(base + "source: {image: 1.dkr.ecr.us-east-1.amazonaws.com/p:1, "
                                            "model_data: /mnt/efs/models}\n")
    assert "rollout.batch_instances" in bad(base + image + "rollout: {batch_instances: 2}\n")
    assert "not valid TOML" in bad("name = ", ".toml")


def test_efs_flag_and_missing_file_are_one_line_errors_with_status_2(aws_env, capsys):
    assert main(["deploy", "create", "-f", str(EXAMPLES / "parley-model-server.toml"), "--efs", "fs-1234",
                 "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot mount EFS" in err and "--model-data s3://" in err
    assert main(["deploy", "status", "-f", "/nonexistent/voice.yaml"]) == 2
    assert "No such file" in capsys.readouterr().err


# ------------------------------------------------------------------------ dry runs
@pytest.mark.parametrize("example", ["sonic-marketplace.yaml", "parley-model-server.toml"])
def test_dry_run_prints_requests_aws_accepts_and_asks_aws_nothing(example, aws_env, monkeypatch, capsys):
    """No credentials are needed: a dry run sends nothing (any request would fail without them)."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert main(["deploy", "create", "-f", str(EXAMPLES / example), "--dry-run"]) == 0
    out = capsys.readouterr().out
    steps = json.loads(out[out.index("["):])
    names = [s["operation"] for s in steps]
    assert names == ["CreateModel", "CreateEndpointConfig", "PutMetricAlarm", "PutMetricAlarm", "PutMetricAlarm",
                     "CreateEndpoint", "RegisterScalableTarget", "PutScalingPolicy"]
    for step in steps:
        service = {"CreateModel": "sagemaker", "CreateEndpointConfig": "sagemaker", "CreateEndpoint": "sagemaker",
                   "PutMetricAlarm": "cloudwatch"}.get(step["operation"], "autoscaling")
        snake = "".join("_" + c.lower() if c.isupper() else c for c in step["operation"]).lstrip("_")
        _validate(ops.Call(service, snake, step["request"], ""))
    model, config, *_, endpoint = (s["request"] for s in steps[:6])
    variant = config["ProductionVariants"][0]
    assert variant["InitialInstanceCount"] >= 2
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert config["MetricsConfig"]["EnableDetailedObservability"] is True
    alarms = [s["request"]["AlarmName"] for s in steps if s["operation"] == "PutMetricAlarm"]
    assert [a["AlarmName"] for a in endpoint["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]] == alarms
    if example.startswith("sonic"):
        assert model["EnableNetworkIsolation"] is True
        assert model["PrimaryContainer"] == {"ModelPackageName": "arn:aws:sagemaker:us-east-1:865070037744:"
                                                                 "model-package/cartesia-sonic-example"}
    else:
        assert "EnableNetworkIsolation" not in model
        assert model["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]["S3DataType"] == "S3Prefix"
        assert model["PrimaryContainer"]["Environment"] == {"PARLEY_MODEL_DIR": "/opt/ml/model"}


# ------------------------------------------------------------------------ under moto
def test_create_status_scale_delete_end_to_end_under_moto(moto_aws, capsys):
    subnet, group = _network(moto_aws)
    spec = _own_spec(subnet, group, instance_type="ml.g4dn.xlarge")   # moto rejects ml.g5/g6 types
    lines: list[str] = []
    deployer = ops.Deployer(moto_aws, say=lines.append, poll_s=0)
    deployer.create(spec, REV)
    assert any("reached privately" in line for line in lines)
    assert any("InService (primary 2/2 instances)" in line for line in lines)

    status = deployer.status(spec.name)
    assert status["status"] == "InService" and status["config"] == f"parley-voice-{REV}"
    assert status["variants"] == [{"variant": "primary", "instance_type": "ml.g4dn.xlarge", "instances": 2,
                                   "desired": 2, "model": f"parley-voice-{REV}",
                                   "autoscaling": {"min": 2, "max": 8, "target_concurrency": 24.0}}]
    assert sorted(status["alarms"]) == sorted(rq.alarm_names("parley-voice"))
    alarm = moto_aws.cloudwatch.describe_alarms(AlarmNames=["parley-voice-first-byte-p99"])["MetricAlarms"][0]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["ExtendedStatistic"], alarm["Threshold"]) == \
        ("Parley", "FirstByteMs", "p99", 800.0)
    model = moto_aws.sagemaker.describe_model(ModelName=f"parley-voice-{REV}")
    assert model["VpcConfig"] == {"SecurityGroupIds": [group], "Subnets": [subnet]}

    deployer.scale(spec.name, "primary", Autoscaling(min=3, max=12, target_concurrency=16), instances=4)
    status = deployer.status(spec.name)
    assert status["variants"][0]["autoscaling"] == {"min": 3, "max": 12, "target_concurrency": 16.0}
    assert status["variants"][0]["desired"] == 4

    deployer.delete(spec.name)
    sm = moto_aws.sagemaker
    assert sm.list_endpoints()["Endpoints"] == [] and sm.list_models()["Models"] == []
    assert sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert moto_aws.cloudwatch.describe_alarms()["MetricAlarms"] == []
    assert moto_aws.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []


def test_cli_status_prints_a_summary_and_json(moto_aws, monkeypatch, capsys):
    subnet, group = _network(moto_aws)
    ops.Deployer(moto_aws, say=lambda _: None, poll_s=0).create(
        _own_spec(subnet, group, instance_type="ml.g4dn.xlarge"), REV)
    monkeypatch.setattr(ops.Clients, "for_region", classmethod(lambda cls, region, runtime_url=None: moto_aws))
    assert main(["deploy", "status", "--name", "parley-voice", "--region", REGION]) == 0
    text = capsys.readouterr().out
    assert "parley-voice: InService" in text and "2/2 x ml.g4dn.xlarge" in text
    assert "autoscaling 2..8 at 24.0 streams/instance" in text
    assert f"--model-url 'sagemaker://parley-voice?region={REGION}'" in text   # the call tier's next step
    assert main(["deploy", "status", "--name", "parley-voice", "--region", REGION, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["variants"][0]["desired"] == 2
    assert Target.parse(status["model_url"]) == Target("parley-voice", REGION)
    assert main(["deploy", "status", "--name", "nope", "--region", REGION]) == 2
    assert "no endpoint nope" in capsys.readouterr().err


def test_a_vpc_without_the_runtime_endpoint_is_refused_before_anything_is_created(moto_aws):
    subnet, group = _network(moto_aws, runtime_endpoint=False)
    deployer = ops.Deployer(moto_aws, say=lambda _: None, poll_s=0)
    with pytest.raises(NetworkError, match="no interface endpoint for com.amazonaws.us-east-1.sagemaker.runtime"):
        deployer.create(_own_spec(subnet, group, instance_type="ml.g4dn.xlarge"), REV)
    assert moto_aws.sagemaker.list_models()["Models"] == []


def test_marketplace_package_instance_type_is_checked_against_the_package(moto_aws):
    subnet, group = _network(moto_aws)
    arn = moto_aws.sagemaker.create_model_package(
        ModelPackageName="sonic", InferenceSpecification={
            "Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/sonic:1"}],
            "SupportedContentTypes": ["application/json"], "SupportedResponseMIMETypes": ["application/jsonlines"],
            "SupportedRealtimeInferenceInstanceTypes": ["ml.g4dn.xlarge", "ml.g4dn.2xlarge"]})["ModelPackageArn"]
    spec = replace(load_spec(EXAMPLES / "sonic-marketplace.yaml"), model_package_arn=arn,
                   network=replace(load_spec(EXAMPLES / "sonic-marketplace.yaml").network, subnets=(subnet,),
                                   security_groups=(group,)))
    deployer = ops.Deployer(moto_aws, say=lambda _: None, poll_s=0)
    with pytest.raises(InstanceTypeError, match="ml.g6e.xlarge is not one the package .* ml.g4dn.2xlarge, ml.g4dn.xlarge"):
        deployer.create(spec, REV)
    deployer.create(replace(spec, instance_type="ml.g4dn.xlarge"), REV)
    sent = next(c.request for c in deployer.done if c.operation == "create_model")
    assert sent["PrimaryContainer"] == {"ModelPackageName": arn} and sent["EnableNetworkIsolation"] is True
    assert moto_aws.sagemaker.describe_endpoint(EndpointName="sonic-voice")["EndpointStatus"] == "InService"


def test_an_unsubscribed_marketplace_package_is_one_clear_line(aws_env, monkeypatch, capsys):
    clients = ops.Clients.for_region(REGION)
    with Stubber(clients.sagemaker) as sm:
        sm.add_client_error("describe_endpoint", "ValidationException",
                            "Could not find endpoint \"sonic-voice\".")
        sm.add_client_error("describe_model_package", "ValidationException",
                            "Caller is not subscribed to the marketplace listing for this model package.")
        monkeypatch.setattr(ops.Clients, "for_region", classmethod(lambda cls, region, runtime_url=None: clients))
        spec_file = EXAMPLES / "sonic-marketplace.yaml"
        assert main(["deploy", "create", "-f", str(spec_file), "--poll-s", "0"]) == 2
        sm.assert_no_pending_responses()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "not subscribed" in err and "Continue to Subscribe" in err
    with pytest.raises(NotSubscribedError):
        with ops.aws("CreateModel"):
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "ValidationException", "Message": "not subscribed"}}, "CreateModel")


# ------------------------------------------------------------------------ updates (Stubber: moto lacks them)
def _endpoint(config: str, status: str, count: int = 2, reason: str | None = None) -> dict:
    out = {"EndpointName": "parley-voice", "EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/parley-voice",
           "EndpointConfigName": config, "EndpointStatus": status, "CreationTime": NOW, "LastModifiedTime": NOW,
           "ProductionVariants": [{"VariantName": "primary", "CurrentInstanceCount": count,
                                   "DesiredInstanceCount": count}]}
    if reason:
        out["FailureReason"] = reason
    return out


def _config(name: str, instance_type: str) -> dict:
    return {"EndpointConfigName": name, "EndpointConfigArn": f"arn:aws:sagemaker:us-east-1:123456789012:"
                                                             f"endpoint-config/{name}",
            "CreationTime": NOW, "ProductionVariants": [{"VariantName": "primary", "ModelName": name,
                                                         "InitialInstanceCount": 2, "InstanceType": instance_type}]}


ROLLING = {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
                                   "WaitIntervalInSeconds": 300, "MaximumExecutionTimeoutInSeconds": 3600,
                                   "RollbackMaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2}},
           "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "parley-voice-first-byte-p99"},
                                                    {"AlarmName": "parley-voice-model-latency-p99"},
                                                    {"AlarmName": "parley-voice-5xx"}]}}


def _with_stubbed_sagemaker(moto_clients: ops.Clients) -> tuple[ops.Clients, Stubber]:
    clients = replace(moto_clients, sagemaker=ops.Clients.for_region(REGION).sagemaker)
    return clients, Stubber(clients.sagemaker)


def _register_scaling(clients: ops.Clients, a: Autoscaling | None = None) -> None:
    for call in ops.Deployer._scaling_calls("parley-voice", "primary", a or Autoscaling()):
        getattr(clients.autoscaling, call.operation)(**call.request)


def test_a_rolling_update_keeps_autoscaling_and_its_count_and_sends_exact_requests(moto_aws):
    subnet, group = _network(moto_aws)
    clients, sm = _with_stubbed_sagemaker(moto_aws)
    _register_scaling(clients)
    old = "parley-voice-20261201-090000"
    new = f"parley-voice-{REV}"
    spec = _own_spec(subnet, group, image="123456789012.dkr.ecr.us-east-1.amazonaws.com/parley-model-server:0.2.0")
    sm.add_response("describe_endpoint", _endpoint(old, "InService", count=3), {"EndpointName": "parley-voice"})
    sm.add_response("describe_endpoint_config", _config(old, "ml.g6e.xlarge"), {"EndpointConfigName": old})
    sm.add_response("create_model", {"ModelArn": "arn:aws:sagemaker:us-east-1:123456789012:model/m"}, {
        "ModelName": new, "ExecutionRoleArn": "arn:aws:iam::123456789012:role/parley-sagemaker",
        "PrimaryContainer": {
            "Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/parley-model-server:0.2.0",
            "ModelDataSource": {"S3DataSource": {"S3Uri": "s3://parley-models-123456789012/models/",
                                                 "S3DataType": "S3Prefix", "CompressionType": "None"}},
            "Environment": {"PARLEY_MODEL_DIR": "/opt/ml/model"},
            "ContainerMetricsConfig": {"MetricsEndpoints": [{"MetricsEndpointPath": "/metrics",
                                                             "MetricPublishFrequencyInSeconds": 10}]}},
        "VpcConfig": {"SecurityGroupIds": [group], "Subnets": [subnet]},
        "Tags": [{"Key": "parley:deployment", "Value": "parley-voice"}]})
    sm.add_response("create_endpoint_config", {"EndpointConfigArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint-config/c"}, {
        "EndpointConfigName": new,
        "ProductionVariants": [{"VariantName": "primary", "ModelName": new, "InitialInstanceCount": 3,
                                "InstanceType": "ml.g6e.xlarge", "InitialVariantWeight": 1.0,
                                "ContainerStartupHealthCheckTimeoutInSeconds": 600,
                                "ModelDataDownloadTimeoutInSeconds": 1200,
                                "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}}],
        "MetricsConfig": {"EnableEnhancedMetrics": True, "EnableDetailedObservability": True,
                          "MetricPublishFrequencyInSeconds": 10},
        "Tags": [{"Key": "parley:deployment", "Value": "parley-voice"}]})
    sm.add_response("update_endpoint", {"EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/parley-voice"}, {
        "EndpointName": "parley-voice", "EndpointConfigName": new, "DeploymentConfig": ROLLING,
        "RetainAllVariantProperties": True})
    sm.add_response("describe_endpoint", _endpoint(old, "Updating", count=3))
    sm.add_response("describe_endpoint", _endpoint(new, "InService", count=3))
    lines: list[str] = []
    with sm:
        ops.Deployer(clients, say=lines.append, poll_s=0).update(spec, REV)
        sm.assert_no_pending_responses()
    assert any("Updating" in line for line in lines) and any(line.endswith("InService (primary 3/3 instances)")
                                                             for line in lines)
    targets = clients.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert [(t["ResourceId"], t["MinCapacity"], t["MaxCapacity"]) for t in targets] == \
        [("endpoint/parley-voice/variant/primary", 2, 8)]


def test_an_alarm_rolls_the_update_back_exit_3_and_autoscaling_comes_back(moto_aws, monkeypatch, tmp_path, capsys):
    """A new instance type takes autoscaling off for the update (AWS refuses it otherwise); the
    rollback must not leave the endpoint without it."""
    subnet, group = _network(moto_aws)
    clients, sm = _with_stubbed_sagemaker(moto_aws)
    _register_scaling(clients, Autoscaling(min=2, max=6, target_concurrency=20))
    old = "parley-voice-20261201-090000"
    spec_file = tmp_path / "voice.toml"
    spec_file.write_text((EXAMPLES / "parley-model-server.toml").read_text()
                         .replace("subnet-0123456789abcdef0", subnet).replace("sg-0123456789abcdef0", group))
    sm.add_response("describe_endpoint", _endpoint(old, "InService"))
    sm.add_response("describe_endpoint_config", _config(old, "ml.g6e.xlarge"))
    sm.add_response("create_model", {"ModelArn": "arn:aws:sagemaker:us-east-1:123456789012:model/m"})
    sm.add_response("create_endpoint_config", {"EndpointConfigArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint-config/c"})

    sm.add_response("update_endpoint", {"EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/parley-voice"}, {
        "EndpointName": "parley-voice", "EndpointConfigName": ANY, "DeploymentConfig": ROLLING})
    sm.add_response("describe_endpoint", _endpoint(old, "Updating"))
    sm.add_response("describe_endpoint", _endpoint(old, "RollingBack"))
    reason = "Rolled back: alarm parley-voice-5xx went to ALARM during the rolling deployment."
    sm.add_response("describe_endpoint", _endpoint(old, "InService", reason=reason))
    sm.add_response("describe_endpoint", _endpoint(old, "InService", reason=reason))   # still there?
    sm.add_response("describe_endpoint", _endpoint(old, "InService", reason=reason))   # settled
    monkeypatch.setattr(ops.Clients, "for_region", classmethod(lambda cls, region, runtime_url=None: clients))
    seen_targets: list[int] = []
    real_update = clients.sagemaker.update_endpoint

    updates: list[ops.Call] = []

    def update_endpoint(**request):
        updates.append(ops.Call("sagemaker", "update_endpoint", request, ""))
        seen_targets.append(len(clients.autoscaling.describe_scalable_targets(
            ServiceNamespace="sagemaker")["ScalableTargets"]))
        return real_update(**request)

    monkeypatch.setattr(clients.sagemaker, "update_endpoint", update_endpoint)
    with sm:
        rc = main(["deploy", "update", "-f", str(spec_file), "--instance-type", "ml.g6e.2xlarge", "--poll-s", "0"])
        sm.assert_no_pending_responses()
    captured = capsys.readouterr()
    assert rc == 3
    new = next(c.request["EndpointConfigName"] for c in updates)
    assert re.fullmatch(r"parley-voice-\d{8}-\d{6}", new)
    assert captured.err.strip().splitlines() == [
        f"parley deploy update: the update to {new} was rolled back; {old} still serves: {reason}"]
    assert "DeleteScalingPolicy" in captured.out and "DeregisterScalableTarget" in captured.out
    assert "RollingBack" in captured.out
    assert seen_targets == [0]        # autoscaling was off while UpdateEndpoint was called
    targets = clients.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert [(t["MinCapacity"], t["MaxCapacity"]) for t in targets] == [(2, 8)]   # the file's autoscaling
    policies = clients.autoscaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    assert [p["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] for p in policies] == [24.0]


def test_update_refuses_an_endpoint_that_is_busy_or_missing(aws_env):
    clients = ops.Clients.for_region(REGION)
    spec = _own_spec("subnet-1", "sg-1")
    with Stubber(clients.sagemaker) as sm:
        sm.add_response("describe_endpoint", _endpoint("parley-voice-20261201-090000", "Updating"))
        with pytest.raises(ops.AwsError, match="is Updating: an update starts from InService"):
            ops.Deployer(clients, say=lambda _: None).update(spec, REV)
        sm.add_client_error("describe_endpoint", "ValidationException", 'Could not find endpoint "parley-voice".')
        with pytest.raises(ops.EndpointNotFoundError, match="parley deploy create makes it"):
            ops.Deployer(clients, say=lambda _: None).update(spec, REV)


def test_update_dry_run_reads_the_endpoint_and_prints_the_rollout(moto_aws):
    subnet, group = _network(moto_aws)
    clients, sm = _with_stubbed_sagemaker(moto_aws)
    _register_scaling(clients)
    old = "parley-voice-20261201-090000"
    sm.add_response("describe_endpoint", _endpoint(old, "InService"))
    sm.add_response("describe_endpoint_config", _config(old, "ml.g6e.xlarge"))
    with sm:
        deployer = ops.Deployer(clients, say=lambda _: None, dry_run=True)
        calls = deployer.update(_own_spec(subnet, group, instance_type="ml.g6e.2xlarge"), REV)
        sm.assert_no_pending_responses()       # nothing but the two reads reached SageMaker
    assert [c.operation for c in calls] == [
        "create_model", "create_endpoint_config", "put_metric_alarm", "put_metric_alarm", "put_metric_alarm",
        "delete_scaling_policy", "deregister_scalable_target", "update_endpoint", "register_scalable_target",
        "put_scaling_policy"]
    for call in calls:
        _validate(call)
    assert clients.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]


# ------------------------------------------------------------------------ invoke (response streaming)
@pytest.fixture(scope="module")
def model_server_upstream():
    from deploy.model_server import ModelServer, ModelServerConfig
    from pipeline.engines.ssm_voice import SSMVoiceEngine
    from pipeline.engines.ssm_recognizer import SSMSTTEngine
    from harness.aws.sagemaker_runtime import LoopThread

    models = Path(__file__).resolve().parents[2] / "models"
    voice = SSMVoiceEngine(models / "tts")
    recogniser = SSMSTTEngine(models / "stt", compile=False)
    loop = LoopThread()
    server = ModelServer(ModelServerConfig(host="127.0.0.1", port=0), voice=voice, recogniser=recogniser)

    async def up():
        await server.start()
        await server.warm()

    loop.run(up)
    yield loop, f"http://127.0.0.1:{server.port}"
    loop.run(server.stop)
    loop.close()
    voice.close()
    recogniser.close()


def _runtime(model_server_upstream, **kw):
    from harness.aws.sagemaker_runtime import FakeRuntime, start_runtime

    loop, upstream = model_server_upstream
    runtime = FakeRuntime(upstream, "parley-voice", **kw)
    runner, port = loop.run(lambda: start_runtime(runtime))
    return runtime, runner, f"http://127.0.0.1:{port}"


def test_invoke_speaks_through_the_runtimes_response_stream_and_writes_a_wav(
        model_server_upstream, aws_env, monkeypatch, tmp_path, capsys):
    runtime, runner, url = _runtime(model_server_upstream)
    try:
        real = ops.Clients.for_region
        monkeypatch.setattr(ops.Clients, "for_region",
                            classmethod(lambda cls, region, runtime_url=None: real(region, runtime_url=url)))
        out = tmp_path / "hello.wav"
        assert main(["deploy", "invoke", "--name", "parley-voice", "--region", REGION, "--text",
                     "Your table is booked for seven.", "--out", str(out), "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["chunks"] > 5 and 0 < summary["first_audio_ms"] < summary["total_ms"]
        with wave.open(str(out)) as w:
            assert (w.getframerate(), w.getnchannels()) == (8000, 1)
            assert abs(w.getnframes() / 8000 - summary["audio_s"]) < 0.01 and w.getnframes() > 8000
        sent = runtime.requests[0]
        assert (sent["content_type"], sent["accept"]) == ("application/json", "application/jsonlines")
        assert json.loads(sent["body"])["transcript"] == "Your table is booked for seven."
        assert main(["deploy", "invoke", "--name", "no-such-endpoint", "--region", REGION]) == 2
        assert "not found" in capsys.readouterr().err
    finally:
        model_server_upstream[0].run(runner.cleanup)


def test_invoke_reports_a_stream_that_fails_midway_in_one_line(model_server_upstream, aws_env):
    runtime, runner, url = _runtime(model_server_upstream, fail_after=2)
    try:
        clients = ops.Clients.for_region(REGION, runtime_url=url)
        with pytest.raises(ops.AwsError, match="ModelStreamError.*the model container stopped"):
            ops.invoke(clients, "parley-voice", "A sentence long enough to take more than two parts.")
        clients.close()
    finally:
        model_server_upstream[0].run(runner.cleanup)
