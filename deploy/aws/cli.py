"""``parley deploy``: the speech models on Amazon SageMaker endpoints, the AWS way (boto3)."""

from __future__ import annotations

import argparse
import json
import sys
import wave
from dataclasses import replace
from pathlib import Path
from typing import Any

from deploy.errors import DeployError, DeploymentSpecError, RolledBackError
from deploy.sagemaker_stream.targets import Target

from .requests import revision_now
from .spec import Autoscaling, DeploymentSpec, load_spec, spec_from_dict

EPILOG = """\
a deployment is a small file (YAML or TOML; deploy/aws/examples/ has both kinds):
  name: parley-voice                    # the endpoint
  region: us-east-1
  role_arn: arn:aws:iam::123456789012:role/parley-sagemaker
  source: {model_package_arn: arn:aws:sagemaker:us-east-1:...:model-package/...}   # Marketplace
  # source: {image: ....dkr.ecr....amazonaws.com/parley-model-server:0.1.0, model_data: s3://b/models/}
  instance_type: ml.g6e.xlarge
  instances: 2
  network: {subnets: [subnet-...], security_groups: [sg-...]}

the life of a deployment:
  parley deploy plan -f voice.yaml           # checks (subscription, instance type, VPC endpoint), then the steps
  parley deploy create -f voice.yaml --dry-run   # the exact requests, as JSON; asks AWS nothing
  parley deploy create -f voice.yaml         # model, config, alarms, endpoint (waits), autoscaling
  parley deploy invoke --name parley-voice --out hello.wav   # a sentence through the endpoint, timed
  parley deploy status --name parley-voice   # instances, autoscaling, last deployment, alarms
  parley deploy update -f voice.yaml --image ...:0.2.0   # rolling, one instance at a time; rolls back
                                             # when an alarm fires (exit status 3)
  parley deploy scale --name parley-voice --min 2 --max 12 --target-concurrency 24
  parley deploy delete --name parley-voice   # endpoint, every revision's model and config, alarms

AWS credentials and Region come the usual way (AWS_PROFILE, AWS_REGION, a host role). The network
(VPC, endpoints, NLB, Direct Connect) is CloudFormation: deploy/aws/templates/, see docs/model-tier.md.
"""


def _common(p: argparse.ArgumentParser, spec_flags: bool = False) -> None:
    p.add_argument("-f", "--file", type=Path, help="the deployment file (YAML or TOML)")
    p.add_argument("--name", help="the endpoint (overrides the file's name)")
    p.add_argument("--region", help="the AWS Region (overrides the file's region)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    if spec_flags:
        p.add_argument("--role-arn", help="the IAM role SageMaker runs the model as")
        p.add_argument("--model-package-arn", help="a Marketplace model package (Cartesia Sonic, Ink, ...) in the Region")
        p.add_argument("--image", help="parley's model-server image in ECR (ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG)")
        p.add_argument("--model-data", help="s3://bucket/prefix/ (or a .tar.gz) holding stt/ and tts/; default: the image's")
        p.add_argument("--efs", metavar="FS", help="an EFS file system for the weights (not possible on SageMaker "
                                                   "endpoints: the command says what to do instead)")
        p.add_argument("--instance-type", help="ml.g6e.xlarge by default")
        p.add_argument("--instances", type=int, help="initial instances, at least 2")
        p.add_argument("--subnets", help="private subnets, comma-separated")
        p.add_argument("--security-groups", help="the models' security groups, comma-separated")
        p.add_argument("--dry-run", action="store_true", help="print the exact requests as JSON and send nothing")


def register_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("deploy", help="run the speech models on Amazon SageMaker endpoints",
                       description="Deploy parley's model server, or a Marketplace model package such as "
                                   "Cartesia Sonic, to a SageMaker endpoint of at least two instances: warm start "
                                   "behind a health check, autoscaling on open streams, alarms, rolling updates "
                                   "that roll back on an alarm.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = p.add_subparsers(dest="step", required=True, metavar="STEP")
    for name, helptext in (("plan", "check the deployment and show what create would do"),
                           ("create", "create the model, config, alarms, endpoint and autoscaling"),
                           ("update", "a new image, weights or instance type, as a rolling update")):
        s = steps.add_parser(name, help=helptext, description=helptext + ".", epilog=EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        _common(s, spec_flags=True)
        s.add_argument("--poll-s", type=float, default=30.0, help="how often to ask AWS while waiting (default 30)")
        s.set_defaults(func=_run, step=name)
    s = steps.add_parser("status", help="the endpoint: status, instances, autoscaling, last deployment, alarms")
    _common(s)
    s.set_defaults(func=_run, step="status")
    s = steps.add_parser("scale", help="set autoscaling (min, max, streams per instance) and optionally the count now")
    _common(s)
    s.add_argument("--min", type=int, help="fewest instances (at least 2)")
    s.add_argument("--max", type=int, help="most instances")
    s.add_argument("--target-concurrency", type=int, help="open streams per instance autoscaling steers to")
    s.add_argument("--instances", type=int, help="set the instance count now")
    s.add_argument("--dry-run", action="store_true", help="print the requests and send nothing")
    s.set_defaults(func=_run, step="scale")
    s = steps.add_parser("invoke", help="a smoke test: speak a sentence through the endpoint and time it")
    _common(s)
    s.add_argument("--text", default="Thanks for calling. How can I help you today?", help="what to say")
    s.add_argument("--voice", default="default", help="the voice id (a Sonic voice's UUID on Cartesia's package)")
    s.add_argument("--rate", type=int, default=8000, help="sample rate of the audio asked for (default 8000)")
    s.add_argument("--out", type=Path, help="write the audio here as WAV")
    s.add_argument("--runtime-url", help="the SageMaker runtime's URL (a VPC endpoint's DNS name; default AWS's)")
    s.set_defaults(func=_run, step="invoke")
    s = steps.add_parser("delete", help="the endpoint, its models and configs of every revision, alarms, autoscaling")
    _common(s)
    s.add_argument("--dry-run", action="store_true", help="print the requests and send nothing")
    s.set_defaults(func=_run, step="delete")


def _spec(args: argparse.Namespace) -> DeploymentSpec:
    """The deployment (plan, create, update): the file with the flags laid over it, or the flags alone."""
    if args.efs:
        raise DeploymentSpecError(f"--efs {args.efs}: SageMaker endpoints cannot mount EFS or FSx; their weights "
                                  f"come from S3 (--model-data s3://bucket/prefix/, copied at start; an uncompressed "
                                  f"prefix starts fastest) or from the image. EFS is for the call tier's hosts "
                                  f"(deploy/aws/templates/parley-network.yaml)")
    flags: dict[str, Any] = {name: getattr(args, name) for name in (
        "name", "region", "role_arn", "model_package_arn", "image", "model_data", "instance_type", "instances")}
    network = {key: tuple(x for x in value.split(",") if x) for key, value in
               (("subnets", args.subnets), ("security_groups", args.security_groups)) if value}
    if args.file:
        spec = load_spec(args.file).with_overrides(**flags)
        return replace(spec, network=replace(spec.network, **network)) if network else spec
    missing = [f"--{k.replace('_', '-')}" for k in ("name", "region", "role_arn") if not flags[k]]
    if missing:  # neither a file nor the whole deployment as flags
        raise DeploymentSpecError(f"give -f FILE (a deployment file: deploy/aws/examples/), or the deployment "
                                  f"as flags ({', '.join(missing)} missing, and a source: --image or "
                                  f"--model-package-arn)")
    source = ("model_package_arn", "image", "model_data")
    raw: dict[str, Any] = {k: v for k, v in flags.items() if v is not None and k not in source}
    raw["source"] = {k: flags[k] for k in source if flags[k]}
    if network:
        raw["network"] = {key: list(value) for key, value in network.items()}
    return spec_from_dict(raw)


def _target(args: argparse.Namespace) -> tuple[str, str, str, Autoscaling]:
    """For the steps that need only the endpoint: name, region, variant and autoscaling."""
    if args.file:
        spec = load_spec(args.file).with_overrides(name=args.name, region=args.region)
        return spec.name, spec.region, spec.variant, spec.autoscaling
    if not args.name or not args.region:
        raise DeploymentSpecError("give -f FILE, or --name and --region")
    return args.name, args.region, "primary", Autoscaling()


def _run(args: argparse.Namespace) -> int:
    from . import operations as ops

    clients: ops.Clients | None = None
    out = sys.stderr if args.json else sys.stdout
    say = lambda line: print(line, file=out, flush=True)  # noqa: E731
    try:
        if args.step in ("plan", "create", "update"):
            spec = _spec(args)
            clients = ops.Clients.for_region(spec.region)
            deployer = ops.Deployer(clients, say=say, poll_s=args.poll_s,
                                    dry_run=args.dry_run or args.step == "plan")
            revision = revision_now()
            if args.step == "plan":
                return _plan(deployer, spec, revision, args.json)
            say(f"parley deploy {args.step}: {spec.name} in {spec.region}, revision {revision}"
                + (" (dry run: nothing is sent)" if deployer.dry_run else ""))
            calls = deployer.create(spec, revision) if args.step == "create" else deployer.update(spec, revision)
            if deployer.dry_run:
                print(json.dumps([c.as_json() for c in calls], indent=2))
            else:
                say(f"{spec.name}: {'created' if args.step == 'create' else 'updated'} (revision {revision})")
            return 0
        name, region, variant, scaling = _target(args)
        clients = ops.Clients.for_region(region, runtime_url=getattr(args, "runtime_url", None))
        deployer = ops.Deployer(clients, say=say, dry_run=getattr(args, "dry_run", False))
        if args.step == "status":
            status = deployer.status(name)
            status["model_url"] = Target(name, region).url()   # what the call tier's --model-url is
            print(json.dumps(status, indent=2, default=str) if args.json else _status_text(status))
        elif args.step == "scale":
            a = replace(scaling, **{k: v for k, v in (("min", args.min), ("max", args.max),
                                                       ("target_concurrency", args.target_concurrency))
                                    if v is not None})
            if not 2 <= a.min <= a.max:
                raise DeploymentSpecError(f"--min {a.min} --max {a.max}: need 2 <= min <= max")
            if args.instances is not None and not a.min <= args.instances <= a.max:
                raise DeploymentSpecError(f"--instances {args.instances} is outside {a.min}..{a.max}")
            calls = deployer.scale(name, variant, a, args.instances)
            if deployer.dry_run:
                print(json.dumps([c.as_json() for c in calls], indent=2))
        elif args.step == "delete":
            calls = deployer.delete(name)
            if deployer.dry_run:
                print(json.dumps([c.as_json() for c in calls], indent=2))
            else:
                say(f"{name}: deleted ({len(calls)} requests)")
        elif args.step == "invoke":
            result = ops.invoke(clients, name, args.text, sample_rate_hz=args.rate, voice=args.voice)
            if args.out:
                with wave.open(str(args.out), "wb") as w:
                    w.setnchannels(1)
                    w.setsampwidth(2)
                    w.setframerate(result.sample_rate_hz)
                    w.writeframes(result.pcm)
            summary = {"endpoint": name, "first_audio_ms": round(result.first_audio_ms, 1),
                       "total_ms": round(result.total_ms, 1), "audio_s": round(result.audio_s, 2),
                       "chunks": result.chunks, "out": str(args.out) if args.out else None}
            print(json.dumps(summary) if args.json else
                  f"{name}: first audio after {summary['first_audio_ms']} ms, {summary['audio_s']} s of audio in "
                  f"{result.chunks} chunks, {summary['total_ms']} ms in all" + (f"; wrote {args.out}" if args.out else ""))
        return 0
    except RolledBackError as exc:
        print(f"parley deploy {args.step}: {exc}", file=sys.stderr)
        return 3
    except DeployError as exc:
        print(f"parley deploy {args.step}: {exc}", file=sys.stderr)
        return 2
    finally:
        if clients is not None:
            clients.close()


def _plan(deployer: Any, spec: DeploymentSpec, revision: str, as_json: bool) -> int:
    notes = deployer.check(spec)
    calls = deployer.create(spec, revision)
    existing = deployer.describe_endpoint(spec.name)
    if as_json:
        print(json.dumps({"checks": notes, "exists": existing is not None,
                          "steps": [c.as_json() for c in calls]}, indent=2, default=str))
        return 0
    print(f"parley deploy plan: {spec.name} in {spec.region}")
    for note in notes:
        print(f"  ok: {note}")
    if existing is not None:
        print(f"  the endpoint exists ({existing['EndpointStatus']}): create would refuse; update changes it")
    print("create would send:")
    for i, call in enumerate(calls, 1):
        print(f"  {i}. {call.name:<26} {call.why}")
    a = spec.autoscaling
    print(f"then: {spec.instances} x {spec.instance_type}, autoscaling {a.min}..{a.max} at {a.target_concurrency} "
          f"streams per instance; rolling updates {spec.rollout.batch_instances} instance(s) at a time, "
          f"{spec.rollout.wait_s} s watched per batch")
    return 0


def _status_text(s: dict[str, Any]) -> str:
    lines = [f"{s['endpoint']}: {s['status']} (config {s['config']}, updated {s['updated']})"]
    if s.get("failure_reason"):
        lines.append(f"  reason: {s['failure_reason']}")
    for v in s["variants"]:
        auto = v["autoscaling"]
        lines.append(f"  {v['variant']}: {v['instances']}/{v['desired']} x {v['instance_type']}, model {v['model']}; "
                     + (f"autoscaling {auto['min']}..{auto['max']} at {auto['target_concurrency']} streams/instance"
                        if auto else "no autoscaling"))
    if s["last_deployment"]:
        lines.append(f"  last deployment: {s['last_deployment']}, rolls back on {', '.join(s['rollback_alarms']) or '-'}")
    if s["alarms"]:
        lines.append("  alarms: " + ", ".join(f"{k} {v}" for k, v in sorted(s["alarms"].items())))
    else:
        lines.append("  alarms: none found")
    lines.append(f"  call tier: parley serve --stt remote --tts remote --model-url '{s['model_url']}' "
                 "(parley's model-server image: its bidirectional streams)")
    return "\n".join(lines)
