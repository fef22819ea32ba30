"""The stack's outputs written into slurmscale.yaml (`slurmscale config from-stack`), so no id
is copied by hand: the region, the events queue, the munge key parameter, the zone, and per
pool its launch template (id and version), subnets and placement group.

`apply` is pure (config data + outputs in, config data and the keys it changed out); the
result is validated as a whole before anything is written."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from slurmscale.config import Config


class StackError(Exception):
    """The stack cannot give the config what it needs: one line, naming what is missing."""


@dataclass(frozen=True)
class Change:
    key: str  # dotted, e.g. pools[gpu-spot].launch_template
    old: Any
    new: Any

    def line(self) -> str:
        return f"{self.key}: {_short(self.old)} -> {_short(self.new)}"


def _short(v: Any) -> str:
    return "(unset)" if v is None else str(v)


def outputs_of(stack: dict[str, Any]) -> dict[str, str]:
    """DescribeStacks' Outputs as a dict."""
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def apply(data: dict[str, Any], cfg: Config, outputs: dict[str, str]) -> tuple[
        dict[str, Any], list[Change]]:
    """The config's data with the stack's outputs in it, and what changed. `cfg` is `data`
    validated (for the pools' logical ids: the template's, from the same config)."""
    from slurmscale.stack.template import pool_ids

    def need(key: str) -> str:
        if key not in outputs:
            raise StackError(f"the stack has no output {key}: was it rendered from this "
                             "config (`slurmscale aws-template`)?")
        return outputs[key]

    if need("ClusterName") != cfg.cluster_name:
        raise StackError(f"the stack is cluster {outputs['ClusterName']!r}'s, the config "
                         f"is {cfg.cluster_name!r}'s")
    new = copy.deepcopy(data)
    changes: list[Change] = []

    def put(where: dict[str, Any], field: str, value: Any, key: str) -> None:
        if where.get(field) != value:
            changes.append(Change(key, where.get(field), value))
            where[field] = value

    aws = new.setdefault("aws", {})
    put(aws, "region", need("Region"), "aws.region")
    put(aws, "interruption_queue_url", need("InterruptionQueueUrl"),
        "aws.interruption_queue_url")
    put(aws, "munge_key_parameter", need("MungeKeyParameter"), "aws.munge_key_parameter")
    dns = dict(new.get("dns") or {})
    put(dns, "hosted_zone_id", need("HostedZoneId"), "dns.hosted_zone_id")
    put(dns, "domain", need("DomainName"), "dns.domain")
    new["dns"] = dns
    subnets = [s for s in need("SubnetIds").split(",") if s]
    ids = pool_ids(cfg)
    for p in new["pools"]:
        stem = ids[p["name"]]
        at = f"pools[{p['name']}]"
        put(p, "launch_template", {"id": need(f"{stem}LaunchTemplateId"),
                                   "version": need(f"{stem}LaunchTemplateVersion")},
            f"{at}.launch_template")
        put(p, "subnets", subnets, f"{at}.subnets")
        if p.get("placement_group") is not None:
            put(p, "placement_group", need(f"{stem}PlacementGroup"), f"{at}.placement_group")
    return new, changes
