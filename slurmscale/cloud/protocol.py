"""What slurmscale needs from a cloud: four idempotent calls keyed by our own ids."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from slurmscale.config import Pool
from slurmscale.model import LaunchedInstance, LaunchResult

TAG_CLUSTER = "slurmscale:cluster"
TAG_POOL = "slurmscale:pool"
TAG_NODE = "slurmscale:node"
TAG_GANG = "slurmscale:gang"
TAG_REQUEST = "slurmscale:request"


class CloudError(RuntimeError):
    """An API-level failure (throttling, permissions, bad config), as opposed to a capacity
    shortfall, which EC2 reports inside a successful CreateFleet response."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True)
class CloudInstance:
    instance_id: str
    state: str
    tags: dict[str, str]
    private_ip: str = ""
    image_id: str = ""
    state_reason: str = ""  # EC2's StateReason.Code, e.g. Server.SpotInstanceTermination
    launched_at: datetime | None = None


class CloudProvider(Protocol):
    def launch(self, pool: Pool, count: int, min_count: int, client_token: str,
               tags: dict[str, str]) -> LaunchResult: ...

    def tag(self, instance_id: str, tags: dict[str, str]) -> None: ...

    def launched_with(self, tags: dict[str, str]) -> tuple[LaunchedInstance, ...]: ...

    def terminate(self, instance_ids: list[str]) -> None: ...

    def find(self, tags: dict[str, str], include_terminated: bool = False
             ) -> list[CloudInstance]: ...


@dataclass(frozen=True)
class QueueMessage:
    receipt: str
    body: str


class EventQueue(Protocol):
    """Where EC2 events arrive (an SQS queue fed by an EventBridge rule)."""

    def receive(self, max_messages: int = 10) -> list[QueueMessage]: ...

    def delete(self, receipt: str) -> None: ...
