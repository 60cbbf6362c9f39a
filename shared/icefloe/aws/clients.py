"""The AWS clients of a Lambda container, made by its :class:`~icefloe.aws.lambda_runtime.Container`
on first use and kept there for its lifetime.

Their endpoints follow boto3's own configuration (``AWS_ENDPOINT_URL_SQS``,
``AWS_ENDPOINT_URL_EMR_SERVERLESS`` point them at a local stack).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_sqs import SQSClient


def sqs_client(region: str) -> SQSClient:
    client: SQSClient = boto3.client("sqs", region_name=region)
    return client


def emr_serverless_client(region: str) -> BaseClient:
    client: BaseClient = boto3.client("emr-serverless", region_name=region)
    return client
