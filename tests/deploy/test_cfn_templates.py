"""The CloudFormation templates under deploy/aws/templates: cfn-lint clean (it checks every
resource against AWS's schemas, offline), and shaped as the deployment needs: only the call tier
reaches the models, every AWS service the VPC needs has its endpoint, >= 2 instances, and the
alarms an update rolls back on are the ones ``parley deploy`` names."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cfnlint.decode import decode

from deploy.aws import requests as rq
from deploy.aws.spec import load_spec

TEMPLATES = Path(__file__).resolve().parents[2] / "deploy" / "aws" / "templates"
ALL = sorted(TEMPLATES.glob("*.yaml"))


def _load(name: str) -> dict:
    template, errors = decode(str(TEMPLATES / name))
    assert not errors, errors
    return template


def test_there_are_templates_and_cfn_lint_passes_on_every_one():
    assert {p.name for p in ALL} >= {"parley-network.yaml", "parley-models.yaml"}
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or shutil.which("cfn-lint")
    assert cfn_lint, "cfn-lint is a test dependency (pip install '.[test]')"
    result = subprocess.run([cfn_lint, *map(str, ALL)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_template_is_caught_by_the_same_check(tmp_path):
    """The lint is not a check that cannot fail: a typo in a property is reported."""
    broken = tmp_path / "broken.yaml"
    broken.write_text((TEMPLATES / "parley-network.yaml").read_text().replace("EnableDnsHostnames", "EnableDnsHostname"))
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or shutil.which("cfn-lint")
    result = subprocess.run([cfn_lint, str(broken)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "EnableDnsHostname" in result.stdout


def test_the_network_lets_only_the_call_tier_reach_the_models_and_needs_no_internet():
    res = _load("parley-network.yaml")["Resources"]
    endpoints = {r["Properties"]["ServiceName"]["Fn::Sub"].split("}.", 1)[1]: r["Properties"]
                 for r in res.values() if r["Type"] == "AWS::EC2::VPCEndpoint"}
    assert sorted(endpoints) == ["ecr.api", "ecr.dkr", "logs", "monitoring", "s3", "sagemaker.api",
                                 "sagemaker.runtime", "sts"]
    assert endpoints["s3"]["VpcEndpointType"] == "Gateway"
    assert all(e["PrivateDnsEnabled"] for k, e in endpoints.items() if k != "s3")
    runtime_groups = [g["Ref"] for g in endpoints["sagemaker.runtime"]["SecurityGroupIds"]]
    for group in runtime_groups + ["ModelGroup"]:
        rules = res[group]["Properties"]["SecurityGroupIngress"]
        assert rules and all(r["SourceSecurityGroupId"] == {"Fn::GetAtt": ["CallTierGroup", "GroupId"]}
                             for r in rules), group
    assert not any(r["Type"] in ("AWS::EC2::InternetGateway", "AWS::EC2::NatGateway") for r in res.values())
    zones = {str(r["Properties"]["AvailabilityZone"]) for r in res.values() if r["Type"] == "AWS::EC2::Subnet"}
    assert len(zones) == 1                                  # one zone: the tightest path
    assert res["CallTierPlacement"]["Properties"]["Strategy"] == "cluster"
    assert res["CallBalancer"]["Properties"]["Scheme"] == "internal"
    assert res["WeightsAccessPoint"]["Properties"]["RootDirectory"]["Path"] == "/parley-models"


def test_the_models_template_matches_what_parley_deploy_creates():
    template = _load("parley-models.yaml")
    res, params = template["Resources"], template["Parameters"]
    assert params["InstanceCount"]["Default"] >= 2 and params["InstanceCount"]["MinValue"] == 2
    variant = res["EndpointConfig"]["Properties"]["ProductionVariants"][0]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    spec = load_spec(Path(__file__).resolve().parents[2] / "deploy" / "aws" / "examples" / "parley-model-server.toml")
    deploy_alarms = {a["MetricName"]: a for a in rq.alarm_requests(spec)}
    for key in ("FirstByteAlarm", "ModelLatencyAlarm", "ErrorsAlarm"):
        alarm = res[key]["Properties"]
        ours = deploy_alarms[alarm["MetricName"]]
        assert alarm["Namespace"] == ours["Namespace"]
        assert alarm["AlarmName"]["Fn::Sub"] == ours["AlarmName"].replace(spec.name, "${EndpointName}")
        assert [d["Name"] for d in alarm["Dimensions"]] == [d["Name"] for d in ours["Dimensions"]]
    rollback = res["Endpoint"]["Properties"]["DeploymentConfig"]
    assert [a["AlarmName"]["Ref"] for a in rollback["AutoRollbackConfiguration"]["Alarms"]] == \
        ["FirstByteAlarm", "ModelLatencyAlarm", "ErrorsAlarm"]
    assert rollback["RollingUpdatePolicy"] == rq.deployment_config(spec)["RollingUpdatePolicy"]
    policy = res["StreamsPolicy"]["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert policy["PredefinedMetricSpecification"]["PredefinedMetricType"] == rq.SCALING_METRIC


@pytest.mark.parametrize("name", [p.name for p in ALL])
def test_every_template_says_what_it_is(name):
    assert len(_load(name)["Description"]) > 80


def test_the_call_tier_is_an_ecs_service_that_never_drops_a_live_call():
    """parley-calls.yaml: >= 2 tasks that an update never reduces, on instances in the network's
    placement group and zone, behind its NLB target groups (health-checked /healthz), the models
    through sagemaker://, records in Aurora PostgreSQL reached only by the call tier; a task taken
    out keeps its calls for the target groups' deregistration delay, then drains within its stop
    timeout."""
    calls = _load("parley-calls.yaml")
    res, params = calls["Resources"], calls["Parameters"]
    assert params["TaskCount"]["MinValue"] == 2 and params["TaskCount"]["Default"] >= 2
    service = res["Service"]["Properties"]
    assert service["DesiredCount"] == {"Ref": "TaskCount"}
    assert service["DeploymentConfiguration"]["MinimumHealthyPercent"] == 100
    assert service["DeploymentConfiguration"]["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True}
    assert {lb["TargetGroupArn"]["Ref"]: lb["ContainerPort"] for lb in service["LoadBalancers"]} == \
        {"WebSocketTargetGroupArn": 8765, "SipTargetGroupArn": 5060}
    assert res["Instances"]["Properties"]["PlacementGroup"] == {"Ref": "CallTierPlacementGroup"}
    assert res["Instances"]["Properties"]["VPCZoneIdentifier"] == [{"Ref": "CallSubnetId"}]

    container = res["Task"]["Properties"]["ContainerDefinitions"][0]
    command = container["Command"]
    assert command[:2] == ["parley", "serve"]
    flag = {command[i]: command[i + 1] for i in range(2, len(command) - 1) if str(command[i]).startswith("--")}
    assert flag["--stt"] == flag["--tts"] == "remote"
    assert flag["--model-url"]["Fn::Sub"].startswith("sagemaker://${EndpointName}?region=")
    assert flag["--emf"] == "-" and flag["--port"] == "8765" and flag["--sip-port"] == "5060"
    # the drain after SIGTERM ends before ECS's SIGKILL; the calls' long wait is the deregistration delay
    assert params["DrainSeconds"]["MaxValue"] < container["StopTimeout"] <= 120
    network = _load("parley-network.yaml")
    assert network["Parameters"]["CallDrainSeconds"]["Default"] == 3600
    for group in ("WebSocketTargets", "SipTargets"):
        attrs = {a["Key"]: a["Value"] for a in network["Resources"][group]["Properties"]["TargetGroupAttributes"]}
        assert attrs["deregistration_delay.timeout_seconds"] == {"Ref": "CallDrainSeconds"}
        assert network["Resources"][group]["Properties"]["HealthCheckPath"] == "/healthz"
    assert "/healthz" in " ".join(container["HealthCheck"]["Command"])

    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env["PARLEY_DB"]["Fn::Sub"].startswith("postgresql://parley@${Database.Endpoint.Address}")
    assert res["Database"]["Properties"]["Engine"] == "aurora-postgresql"
    assert res["DatabaseWriter"]["Properties"]["AvailabilityZone"] == {"Ref": "AvailabilityZone"}
    db_rules = res["DatabaseGroup"]["Properties"]["SecurityGroupIngress"]
    assert [r["SourceSecurityGroupId"] for r in db_rules] == [{"Ref": "CallTierSecurityGroupId"}]
    actions = res["TaskRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]
    assert "sagemaker:InvokeEndpoint" in actions["Action"] and "endpoint/${EndpointName}" in actions["Resource"]["Fn::Sub"]


def test_the_recordings_bucket_is_private_encrypted_expires_its_calls_and_the_task_writes_only_there():
    """parley-calls.yaml with RecordingRetentionDays: the servers upload each call's recording
    (--recordings-s3) to a bucket with default encryption, every public access blocked, TLS only,
    and a lifecycle rule that expires the recordings after the retention (and drops abandoned
    multipart uploads); the task role may put, read and abort under that prefix, nothing else."""
    calls = _load("parley-calls.yaml")
    res, params = calls["Resources"], calls["Parameters"]
    assert params["RecordingRetentionDays"]["Default"] == 0   # off unless the operator sets a retention
    assert calls["Conditions"]["WithRecordings"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "RecordingRetentionDays"}, 0]}]}
    bucket = res["RecordingsBucket"]
    assert bucket["Condition"] == "WithRecordings" and bucket["DeletionPolicy"] == "Retain"
    props = bucket["Properties"]
    (encryption,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    assert props["PublicAccessBlockConfiguration"] == {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                                        "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    (rule,) = props["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled" and rule["Prefix"] == "calls/"
    assert rule["ExpirationInDays"] == {"Ref": "RecordingRetentionDays"}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    (tls_only,) = res["RecordingsBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert tls_only["Effect"] == "Deny" and tls_only["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}

    policies = res["TaskRole"]["Properties"]["Policies"]
    (conditional,) = [p["Fn::If"] for p in policies if "Fn::If" in p]
    assert conditional[0] == "WithRecordings" and conditional[2] == {"Ref": "AWS::NoValue"}
    objects, listing = conditional[1]["PolicyDocument"]["Statement"]
    assert sorted(objects["Action"]) == ["s3:AbortMultipartUpload", "s3:GetObject", "s3:ListMultipartUploadParts",
                                         "s3:PutObject"]
    assert objects["Resource"] == {"Fn::Sub": "${RecordingsBucket.Arn}/calls/*"}
    assert listing["Action"] == "s3:ListBucket" and listing["Condition"] == {"StringLike": {"s3:prefix": "calls/*"}}

    command = res["Task"]["Properties"]["ContainerDefinitions"][0]["Command"]
    added = [c["Fn::If"] for c in command if isinstance(c, dict) and "Fn::If" in c]
    assert all(a[0] == "WithRecordings" and a[2] == {"Ref": "AWS::NoValue"} for a in added)
    flags = [a[1] for a in added]
    assert flags[flags.index("--recordings-s3") + 1] == {"Fn::Sub": "s3://${RecordingsBucket}/calls/"}
    assert "--recordings" in flags   # written on the task's disk first, then uploaded
