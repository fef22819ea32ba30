"""EC2 backend: a gang is one `CreateFleet` of type `instant` with MinTargetCapacity.

With MinTargetCapacity = the gang's size EC2 launches all of it or nothing; capacity
shortfalls come back in `Errors[]` of a successful response, while throttling and
permission/config problems come back as API errors (raised as CloudError).
"""

from __future__ import annotations

import logging

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from slurmscale.cloud.protocol import CloudError, CloudInstance
from slurmscale.config import AwsSettings, CapacityType, Pool
from slurmscale.model import LaunchedInstance, LaunchResult

log = logging.getLogger(__name__)

_LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


def _code(e: ClientError) -> tuple[str, str]:
    err = e.response.get("Error", {})
    return str(err.get("Code", "Unknown")), str(err.get("Message", str(e)))


class EC2Cloud:
    def __init__(self, aws: AwsSettings) -> None:
        self.client = boto3.client(
            "ec2", region_name=aws.region, endpoint_url=aws.endpoint_url,
            config=BotoConfig(retries={"max_attempts": aws.max_attempts, "mode": "standard"},
                              connect_timeout=5, read_timeout=60),
        )

    def _call(self, name: str, **kwargs: object) -> dict:
        try:
            return getattr(self.client, name)(**kwargs)
        except ClientError as e:
            raise CloudError(*_code(e)) from None
        except BotoCoreError as e:
            raise CloudError(type(e).__name__, str(e)) from None

    def fleet_request(self, pool: Pool, count: int, min_count: int, client_token: str,
                      tags: dict[str, str]) -> dict:
        lt: dict[str, str] = {"Version": pool.launch_template.version}
        if pool.launch_template.id:
            lt["LaunchTemplateId"] = pool.launch_template.id
        else:
            lt["LaunchTemplateName"] = pool.launch_template.name or ""
        overrides = [{"InstanceType": t, "SubnetId": s}
                     for t in pool.instance_types for s in pool.subnets]
        spot = pool.capacity_type is CapacityType.SPOT
        options = {"MinTargetCapacity": min_count, "SingleInstanceType": True,
                   "SingleAvailabilityZone": True}
        req: dict = {
            "Type": "instant",
            "ClientToken": client_token,
            "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": lt,
                                       "Overrides": overrides}],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": count,
                "DefaultTargetCapacityType": "spot" if spot else "on-demand",
                ("SpotTargetCapacity" if spot else "OnDemandTargetCapacity"): count,
            },
            "TagSpecifications": [{"ResourceType": "instance",
                                   "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        }
        if spot:
            req["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized", **options}
        else:
            req["OnDemandOptions"] = {"AllocationStrategy": "lowest-price", **options}
        return req

    def launch(self, pool: Pool, count: int, min_count: int, client_token: str,
               tags: dict[str, str]) -> LaunchResult:
        resp = self._call("create_fleet",
                          **self.fleet_request(pool, count, min_count, client_token, tags))
        ids: list[tuple[str, str, str]] = []
        for group in resp.get("Instances", []):
            for iid in group.get("InstanceIds", []):
                ids.append((iid, group.get("InstanceType", ""), group.get("Lifecycle", "")))
        errors = resp.get("Errors", [])
        code = errors[0].get("ErrorCode", "") if errors else ""
        message = errors[0].get("ErrorMessage", "") if errors else ""
        details = {i[0]: i for i in ids}
        described = self._describe([i[0] for i in ids]) if ids else {}
        instances = tuple(
            LaunchedInstance(
                instance_id=iid, instance_type=itype or d.get("InstanceType", ""),
                lifecycle=life or d.get("InstanceLifecycle", "on-demand"),
                image_id=d.get("ImageId", ""), private_ip=d.get("PrivateIpAddress", ""),
                private_dns=d.get("PrivateDnsName", ""), subnet_id=d.get("SubnetId", ""),
            )
            for iid, (_, itype, life) in details.items()
            for d in [described.get(iid, {})]
        )
        return LaunchResult(instances=instances, error_code=code, error_message=message,
                            fleet_id=resp.get("FleetId", ""))

    def _tagged(self, tags: dict[str, str], states: list[str] | None) -> list[dict]:
        """DescribeInstances by tags (and states), every page; errors as CloudError."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
        if states:
            filters.append({"Name": "instance-state-name", "Values": states})
        out: list[dict] = []
        try:
            for page in self.client.get_paginator("describe_instances").paginate(
                    Filters=filters):
                for res in page.get("Reservations", []):
                    out.extend(res.get("Instances", []))
        except ClientError as e:
            raise CloudError(*_code(e)) from None
        except BotoCoreError as e:
            raise CloudError(type(e).__name__, str(e)) from None
        return out

    def launched_with(self, tags: dict[str, str]) -> tuple[LaunchedInstance, ...]:
        """Pending/running instances carrying all of `tags`: what a launch cut off after its
        CreateFleet left behind (each launch tags its instances with its gang)."""
        return tuple(sorted((LaunchedInstance(
            instance_id=d["InstanceId"], instance_type=d.get("InstanceType", ""),
            lifecycle=d.get("InstanceLifecycle", "on-demand"), image_id=d.get("ImageId", ""),
            private_ip=d.get("PrivateIpAddress", ""), private_dns=d.get("PrivateDnsName", ""),
            subnet_id=d.get("SubnetId", ""))
            for d in self._tagged(tags, ["pending", "running"])),
            key=lambda i: i.instance_id))

    def _describe(self, ids: list[str]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        paginator = self.client.get_paginator("describe_instances")
        try:
            for page in paginator.paginate(InstanceIds=ids):
                for res in page.get("Reservations", []):
                    for inst in res.get("Instances", []):
                        out[inst["InstanceId"]] = inst
        except ClientError as e:
            code, msg = _code(e)
            # Freshly launched instances can lag in DescribeInstances (eventual consistency);
            # the details are a nicety here, the ids from CreateFleet are what count.
            log.warning("describe of new instances failed (%s: %s); continuing", code, msg)
        return out

    def tag(self, instance_id: str, tags: dict[str, str]) -> None:
        self._call("create_tags", Resources=[instance_id],
                   Tags=[{"Key": k, "Value": v} for k, v in tags.items()])

    def terminate(self, instance_ids: list[str]) -> None:
        for i in range(0, len(instance_ids), 500):
            self._call("terminate_instances", InstanceIds=instance_ids[i:i + 500])

    def find(self, tags: dict[str, str], include_terminated: bool = False
             ) -> list[CloudInstance]:
        return [CloudInstance(
            instance_id=inst["InstanceId"], state=inst.get("State", {}).get("Name", ""),
            tags={t["Key"]: t["Value"] for t in inst.get("Tags", [])},
            private_ip=inst.get("PrivateIpAddress", ""), image_id=inst.get("ImageId", ""),
            state_reason=inst.get("StateReason", {}).get("Code", ""),
            launched_at=inst.get("LaunchTime"))
            for inst in self._tagged(tags, None if include_terminated else _LIVE_STATES)]
