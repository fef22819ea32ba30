"""The SQS queue an EventBridge rule fills with EC2 events (spot interruption warnings,
rebalance recommendations, state changes). Short polls: the daemon's tick is the poll period."""

from __future__ import annotations

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from slurmscale.cloud.protocol import CloudError, QueueMessage
from slurmscale.config import AwsSettings


class SqsEventQueue:
    def __init__(self, aws: AwsSettings, queue_url: str) -> None:
        self.url = queue_url
        self.client = boto3.client(
            "sqs", region_name=aws.region,
            endpoint_url=aws.sqs_endpoint_url or aws.endpoint_url,
            config=BotoConfig(retries={"max_attempts": aws.max_attempts, "mode": "standard"},
                              connect_timeout=5, read_timeout=30))

    def _call(self, name: str, **kwargs: object) -> dict:
        try:
            return getattr(self.client, name)(**kwargs)
        except ClientError as e:
            err = e.response.get("Error", {})
            raise CloudError(str(err.get("Code", "Unknown")), str(err.get("Message", e))) \
                from None
        except BotoCoreError as e:
            raise CloudError(type(e).__name__, str(e)) from None

    def receive(self, max_messages: int = 10) -> list[QueueMessage]:
        resp = self._call("receive_message", QueueUrl=self.url,
                          MaxNumberOfMessages=max_messages, WaitTimeSeconds=0)
        return [QueueMessage(m["ReceiptHandle"], m.get("Body", ""))
                for m in resp.get("Messages", [])]

    def delete(self, receipt: str) -> None:
        self._call("delete_message", QueueUrl=self.url, ReceiptHandle=receipt)
