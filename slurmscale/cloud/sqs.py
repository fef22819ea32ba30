"""The SQS queue an EventBridge rule fills with EC2 events (spot interruption warnings,
rebalance recommendations, state changes). Short polls: the daemon's tick is the poll period."""

from __future__ import annotations

from slurmscale.cloud.aws import call, make_client
from slurmscale.cloud.protocol import QueueMessage
from slurmscale.config import AwsSettings


class SqsEventQueue:
    def __init__(self, aws: AwsSettings, queue_url: str) -> None:
        self.url = queue_url
        self.client = make_client("sqs", aws, aws.sqs_endpoint_url or aws.endpoint_url)

    def _call(self, name: str, **kwargs: object) -> dict:
        return call(self.client, name, **kwargs)

    def receive(self, max_messages: int = 10) -> list[QueueMessage]:
        resp = self._call("receive_message", QueueUrl=self.url,
                          MaxNumberOfMessages=max_messages, WaitTimeSeconds=0)
        return [QueueMessage(m["ReceiptHandle"], m.get("Body", ""))
                for m in resp.get("Messages", [])]

    def delete(self, receipt: str) -> None:
        self._call("delete_message", QueueUrl=self.url, ReceiptHandle=receipt)
