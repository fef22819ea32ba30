"""One way to make a boto3 client and one way to call it, for every AWS service slurmscale
uses (EC2, SQS, Route 53): botocore's standard retries (jittered exponential backoff, the
throttling codes included) with the config's attempts, short connect timeouts, and every
failure raised as a CloudError carrying AWS's code and message (a transport failure's code
is botocore's class name: EndpointConnectionError, ReadTimeoutError, NoCredentialsError)."""

from __future__ import annotations

from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from slurmscale import timeframe
from slurmscale.cloud.protocol import CloudError
from slurmscale.config import AwsSettings
from slurmscale.identity import user_agent_extra


def make_client(service: str, aws: AwsSettings, endpoint_url: str | None,
                read_timeout: float = 30) -> Any:
    """A client whose requests name slurmscale and this process in their user agent
    (CloudTrail's `userAgent`: which daemon of two made a call)."""
    return boto3.client(
        service, region_name=aws.region, endpoint_url=endpoint_url,
        config=BotoConfig(retries={"max_attempts": aws.max_attempts, "mode": "standard"},
                          connect_timeout=5, read_timeout=read_timeout,
                          user_agent_extra=user_agent_extra()))


def error_of(e: ClientError) -> CloudError:
    err = e.response.get("Error", {})
    return CloudError(str(err.get("Code", "Unknown")), str(err.get("Message", str(e))))


def learn_time(answer: dict) -> dict:
    """The answer, after AWS's clock in it (its HTTP Date) is learnt (timeframe.py)."""
    date = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if date:
        try:
            timeframe.FRAME.learn_true(parsedate_to_datetime(date).timestamp())
        except (TypeError, ValueError):
            pass
    return answer


def call(client: Any, name: str, **kwargs: object) -> dict:
    """`client.<name>(**kwargs)`, its failures as CloudError."""
    try:
        return learn_time(getattr(client, name)(**kwargs))
    except ClientError as e:
        raise error_of(e) from None
    except BotoCoreError as e:
        raise CloudError(type(e).__name__, str(e)) from None


def pages(paginator: Any, **kwargs: object) -> Iterator[dict]:
    """Every page of a paginated call, its failures as CloudError."""
    try:
        for page in paginator.paginate(**kwargs):
            yield learn_time(page)
    except ClientError as e:
        raise error_of(e) from None
    except BotoCoreError as e:
        raise CloudError(type(e).__name__, str(e)) from None
