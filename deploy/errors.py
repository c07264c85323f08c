"""Exceptions raised by the ``deploy`` package.

Hierarchy::

    DeployError                      base of everything this package raises
    ├── DeploymentSpecError      a deployment file or flag that cannot describe a deployment
    ├── AwsError                 AWS refused a request (the message names the call and AWS's reason)
    │   ├── NotSubscribedError   the account has no subscription to the Marketplace model package
    │   └── EndpointNotFoundError    no endpoint of that name in the account and Region
    ├── InstanceTypeError        an instance type the model package does not support
    ├── NetworkError             a VPC the endpoint cannot be reached in (no SageMaker runtime endpoint)
    ├── DeploymentFailedError    an endpoint that ended Failed, or an update that could not roll back
    ├── RolledBackError          an update that SageMaker rolled back (an alarm fired); the old
    │                            version still serves
    ├── ModelUrlError            a --model-url that names no model tier (sagemaker://ENDPOINT?...)
    └── BridgeError              the sagemaker:// bridge process could not start

botocore's exceptions are translated once, in :mod:`deploy.aws.operations`, with ``raise ... from
exc``: the command line prints one line, never a botocore traceback.
"""

from __future__ import annotations


class DeployError(Exception):
    """Base class of every error raised by ``deploy``."""


class DeploymentSpecError(DeployError, ValueError):
    """A deployment file or a flag that cannot describe a deployment (the message names the field)."""


class AwsError(DeployError):
    """AWS refused a request. ``code`` is AWS's error code (``ValidationException``, ...)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class NotSubscribedError(AwsError):
    """The account is not subscribed to the Marketplace listing of the model package."""


class EndpointNotFoundError(AwsError):
    """No endpoint of that name in the account and Region."""


class InstanceTypeError(DeployError):
    """The instance type is not one the model package supports for real-time inference."""


class NetworkError(DeployError):
    """The endpoint's VPC lacks what the call tier needs to reach it privately."""


class DeploymentFailedError(DeployError):
    """An endpoint that ended ``Failed``, or an update whose rollback failed too."""


class RolledBackError(DeployError):
    """An update SageMaker rolled back: an alarm fired during the rollout. The old version serves."""


class ModelUrlError(DeployError, ValueError):
    """A ``--model-url`` that cannot name a model tier (``sagemaker://ENDPOINT?region=...``)."""


class BridgeError(DeployError):
    """The ``sagemaker://`` bridge process could not start (no Python 3.12 venv, no credentials,
    no Region); the message says which and how to fix it."""
