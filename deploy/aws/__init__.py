"""parley's speech models on Amazon SageMaker: ``parley deploy`` (boto3) and the CloudFormation
templates of the private network around them (``templates/``).

    spec.py        a deployment file (YAML or TOML) -> DeploymentSpec, checked once
    requests.py    the exact AWS requests, pure functions of the spec (what --dry-run prints)
    operations.py  checks, requests in order, waits, rollback detection; botocore errors translated
    cli.py         parley deploy plan|create|status|update|scale|invoke|delete
"""

from .operations import Call, Clients, Deployer, invoke
from .spec import DeploymentSpec, load_spec

__all__ = ["Call", "Clients", "Deployer", "DeploymentSpec", "invoke", "load_spec"]
