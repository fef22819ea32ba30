"""The ground slurmscale's configuration stands on (config.py has the whole of it): the
strict model every section is (`_Strict`: unknown keys, inf/nan, a boolean for a number and
a time past a year refused), the enums the sections share, and the Capacity Block leads
their defaults come from."""

from __future__ import annotations

import typing
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

_NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"
# Time to requeue what still runs on a block pool and power its nodes down, past SuspendTimeout
BLOCK_SAFETY_S = 300.0
# EC2 user guide, "Monitor Capacity Blocks using EventBridge": a block's instances begin
# terminating 30 minutes before its end, and the Expiration Warning comes 10 minutes before
# that, 40 minutes before the end
BLOCK_TERMINATION_LEAD_S = 1800.0
BLOCK_WARNING_LEAD_S = BLOCK_TERMINATION_LEAD_S + 600.0


def default_block_margin_s(termination_lead_s: float, suspend_timeout: float) -> float:
    """How long before a block's end its window closes by default: time to requeue and power
    down before EC2's terminations begin, and no later than EC2's Expiration Warning (on
    which the daemon closes a block at once), so that the close Slurm planned against is
    the one that happens and no job starts in between only to be requeued."""
    return max(termination_lead_s + suspend_timeout + BLOCK_SAFETY_S,
               termination_lead_s + BLOCK_WARNING_LEAD_S - BLOCK_TERMINATION_LEAD_S)

class ConfigError(Exception):
    """The configuration file is missing, unreadable or invalid; the message says where."""


class CapacityType(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    # a Capacity Block for ML: a reservation with a start and an end, paid in advance; the
    # pool's nodes are usable only inside its window (docs/capacity.md)
    CAPACITY_BLOCK = "capacity-block"


class Placement(StrEnum):
    """Where a gang's instances are placed: one cluster placement group per gang (created
    before its first fleet, deleted once its instances are gone)."""

    PER_GANG = "per-gang"


class AddressSource(StrEnum):
    """Where the NodeAddr written back to Slurm comes from.

    `loopback` exists for the local cluster and tests: moto's fake private IPs must never
    receive traffic, so every node address there is 127.0.0.1.
    """

    PRIVATE_IP = "private-ip"
    PRIVATE_DNS = "private-dns"
    LOOPBACK = "loopback"


# The longest time any `*_s` key may name: a year. Longer is a typo or an attempt at
# "never", and reaches datetime arithmetic far from the config (`leak_grace_s: 1e308`).
MAX_DURATION_S = 366 * 86400.0


def _takes_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    return any(_takes_bool(a) for a in typing.get_args(annotation))


class _Strict(BaseModel):
    # inf and nan are no durations, prices or budgets: refused everywhere (an infinite TTL
    # or hold time would reach datetime arithmetic and fail far from the config)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bools_for_numbers_and_no_endless_times(cls, data: Any) -> Any:
        """YAML's `true` where a number is meant (pydantic would read it as 1: `cpus_per_node:
        true` was a node line of one CPU), and a time past MAX_DURATION_S."""
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            field = cls.model_fields.get(name) if isinstance(name, str) else None
            if field is None:
                continue
            if isinstance(value, bool) and not _takes_bool(field.annotation):
                raise ValueError(f"{name}: {value!r} is a boolean where a value is meant")
            if (name.endswith("_s") and isinstance(value, int | float)
                    and not isinstance(value, bool) and value > MAX_DURATION_S):
                raise ValueError(f"{name}: {value!r} seconds is longer than a year "
                                 f"({MAX_DURATION_S:g} s), the longest time slurmscale takes")
        return data
