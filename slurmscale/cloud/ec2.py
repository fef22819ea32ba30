"""EC2 backend: a gang is one `CreateFleet` of type `instant` with MinTargetCapacity.

With MinTargetCapacity = the gang's size EC2 launches all of it or nothing; capacity
shortfalls come back in `Errors[]` of a successful response, while throttling and
permission/config problems come back as API errors (raised as CloudError).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from slurmscale import timeframe
from slurmscale.cloud.aws import call, error_of, make_client, pages
from slurmscale.cloud.protocol import CloudError, CloudInstance, FleetSpec
from slurmscale.config import AwsSettings, Pool
from slurmscale.model import (
    INTERRUPTIBLE,
    CapacityReservation,
    FleetError,
    InstanceHealth,
    InstanceShape,
    LaunchedInstance,
    LaunchResult,
    NetworkPlace,
    ScheduledEvent,
)

log = logging.getLogger(__name__)

# DescribeInstanceTopology and DescribeCapacityReservationTopology take at most 100 explicit
# ids a request
TOPOLOGY_IDS_PER_CALL = 100

NOT_FOUND = "InvalidInstanceID.NotFound"  # an instance id EC2 does not have

_LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]
IDS_PER_CALL = 100  # instance ids per DescribeInstances filter


def _launched(d: dict, iid: str, itype: str = "", life: str = "") -> LaunchedInstance:
    """A LaunchedInstance from DescribeInstances' item `d` (empty if the describe lagged) and
    what CreateFleet's answer said of it."""
    return LaunchedInstance(
        instance_id=iid, instance_type=itype or d.get("InstanceType", ""),
        lifecycle=life or d.get("InstanceLifecycle", "on-demand"),
        image_id=d.get("ImageId", ""), private_ip=d.get("PrivateIpAddress", ""),
        private_dns=d.get("PrivateDnsName", ""), subnet_id=d.get("SubnetId", ""),
        capacity_reservation_id=d.get("CapacityReservationId", ""))


# slurmscale's reservation kinds as ReservedCapacityOptions.ReservationTypes names them
RESERVATION_TYPES = {"default": "on-demand-capacity-reservation",
                     "capacity-block": "capacity-block",
                     INTERRUPTIBLE: "interruptible-capacity-reservation"}


def _seconds(t: object) -> float | None:
    """An EC2 time (true time) as the daemon's steady time (timeframe.py)."""
    return timeframe.FRAME.from_true(t.timestamp()) if isinstance(t, datetime) else None


def _when(t: object) -> datetime | None:
    s = _seconds(t)
    return None if s is None else datetime.fromtimestamp(s, UTC)


class EC2Cloud:
    def __init__(self, aws: AwsSettings) -> None:
        self.client = make_client("ec2", aws, aws.endpoint_url, read_timeout=60)
        self._paginators: dict[str, Any] = {}

    def _paginator(self, operation: str) -> Any:
        """One paginator per operation for the client's life: botocore builds a new class
        for every get_paginator call, garbage that only a full collection frees (it grew
        the daemon by megabytes an hour)."""
        if operation not in self._paginators:
            self._paginators[operation] = self.client.get_paginator(operation)
        return self._paginators[operation]

    def _call(self, name: str, **kwargs: object) -> dict:
        return call(self.client, name, **kwargs)

    def fleet_request(self, pool: Pool, count: int, min_count: int, client_token: str,
                      tags: dict[str, str], spec: FleetSpec | None = None) -> dict:
        spec = spec or FleetSpec.of(pool)
        lt: dict[str, str] = {"Version": spec.launch_template_version}
        if pool.launch_template.id:
            lt["LaunchTemplateId"] = pool.launch_template.id
        else:
            lt["LaunchTemplateName"] = pool.launch_template.name or ""
        several = len(spec.instance_types) > 1
        overrides = []
        for t, s in spec.overrides():
            o: dict = {"InstanceType": t, "SubnetId": s}
            if several:  # the pool's types in preference order: 0 is the first choice
                o["Priority"] = float(spec.instance_types.index(t))
            if spec.placement_group:
                o["Placement"] = {"GroupName": spec.placement_group}
            overrides.append(o)
        spot = spec.on_spot(pool)
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
        if spec.reservation_ids:
            # Into reservations by id (the open blocks, or the ODCRs the gang fits whole in):
            # an instant fleet of DefaultTargetCapacityType reserved-capacity whose
            # ReservedCapacityOptions name the reservation types and the ids (EC2 API
            # reference, CreateFleet, ReservedCapacityOptionsRequest and
            # FleetCapacityReservationTargetRequest), with no On-Demand or Spot target (the
            # user guide: not supported with reserved-capacity), so each window's fleets go to
            # that window's blocks whatever the template targets, and ODCRs need no resource
            # group. No fallback: the gang was routed here because it fits whole; what EC2
            # gives short is rolled back (all or nothing).
            req["TargetCapacitySpecification"] = {"TotalTargetCapacity": count,
                                                  "DefaultTargetCapacityType": "reserved-capacity"}
            req["ReservedCapacityOptions"] = {
                "ReservationTypes": [RESERVATION_TYPES[k] for k in spec.reservation_kinds],
                "CapacityReservationTarget": {"CapacityReservationIds": list(
                    spec.reservation_ids)}}
            return req
        if spot:
            strategy = "capacity-optimized-prioritized" if several else "price-capacity-optimized"
            req["SpotOptions"] = {"AllocationStrategy": strategy, **options}
        else:
            od: dict = {"AllocationStrategy": "prioritized" if several else "lowest-price",
                        **options}
            if spec.reserved:
                od["CapacityReservationOptions"] = {
                    "UsageStrategy": "use-capacity-reservations-first"}
            req["OnDemandOptions"] = od
        return req

    def launch(self, pool: Pool, count: int, min_count: int, client_token: str,
               tags: dict[str, str], spec: FleetSpec | None = None) -> LaunchResult:
        resp = self._call("create_fleet", **self.fleet_request(pool, count, min_count,
                                                               client_token, tags, spec))
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
            _launched(d, iid, itype, life)
            for iid, (_, itype, life) in details.items()
            for d in [described.get(iid, {})]
        )
        return LaunchResult(instances=instances, error_code=code, error_message=message,
                            fleet_id=resp.get("FleetId", ""), errors=tuple(
                                FleetError(str(e.get("ErrorCode", "")), str(o["InstanceType"]),
                                           str(o.get("SubnetId", "")))
                                for e in errors for o in [e.get("LaunchTemplateAndOverrides",
                                                                {}).get("Overrides", {})]
                                if o.get("InstanceType")))

    def _tagged(self, tags: dict[str, str], states: list[str] | None,
                ids: list[str] | None = None) -> list[dict]:
        """DescribeInstances by tags (and states, and ids), every page; errors as CloudError.
        Ids go in a filter, not InstanceIds: "If you specify an instance ID that is not
        valid, an error is returned" (EC2 API reference, DescribeInstances), and an
        instance terminated over an hour ago is no longer known."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
        if states:
            filters.append({"Name": "instance-state-name", "Values": states})
        if ids is not None:
            filters.append({"Name": "instance-id", "Values": ids})
        out: list[dict] = []
        for page in pages(self._paginator("describe_instances"), Filters=filters):
            for res in page.get("Reservations", []):
                out.extend(res.get("Instances", []))
        return out

    def launched_with(self, tags: dict[str, str]) -> tuple[LaunchedInstance, ...]:
        """Pending/running instances carrying all of `tags`: what a launch cut off after its
        CreateFleet left behind (each launch tags its instances with its gang)."""
        return tuple(sorted((_launched(d, d["InstanceId"])
                             for d in self._tagged(tags, ["pending", "running"])),
                            key=lambda i: i.instance_id))

    def _describe(self, ids: list[str]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        paginator = self._paginator("describe_instances")
        try:
            for page in paginator.paginate(InstanceIds=ids):
                for res in page.get("Reservations", []):
                    for inst in res.get("Instances", []):
                        out[inst["InstanceId"]] = inst
        except ClientError as e:
            # Freshly launched instances can lag in DescribeInstances (eventual consistency);
            # the details are a nicety here, the ids from CreateFleet are what count.
            log.warning("describe of new instances failed (%s); continuing", error_of(e))
        return out

    def tag(self, instance_id: str, tags: dict[str, str]) -> None:
        self._call("create_tags", Resources=[instance_id],
                   Tags=[{"Key": k, "Value": v} for k, v in tags.items()])

    def terminate(self, instance_ids: list[str]) -> None:
        for i in range(0, len(instance_ids), 500):
            self._terminate(instance_ids[i:i + 500])

    def _terminate(self, ids: list[str]) -> None:
        """One TerminateInstances. An id EC2 does not have fails the whole call with
        `InvalidInstanceID.NotFound`, naming the ids ("The instance ID 'i-...' does not
        exist", or "IDs '...' do not exist": EC2 API reference, Common client error codes):
        those need no terminating, the rest are asked again. Named none (a message of
        another shape): one call each, so a stale id never keeps the others running."""
        try:
            self._call("terminate_instances", InstanceIds=ids)
            return
        except CloudError as e:
            if e.code != NOT_FOUND or not ids:
                raise
            named = set(re.findall(r"i-[0-9a-f]+", e.message)) & set(ids)
        rest = [i for i in ids if i not in named]
        if not named:  # which one EC2 does not know is not said: ask for each alone
            if len(ids) == 1:
                log.warning("EC2 does not know instance %s: taken as terminated", ids[0])
                return
            for one in ids:
                self._terminate([one])
            return
        log.warning("EC2 does not know instance(s) %s: taken as terminated",
                    ",".join(sorted(named)))
        if rest:
            self._terminate(rest)

    def stop(self, instance_ids: list[str]) -> None:
        for i in range(0, len(instance_ids), 500):
            self._call("stop_instances", InstanceIds=instance_ids[i:i + 500])

    def start(self, instance_id: str) -> None:
        self._call("start_instances", InstanceIds=[instance_id])

    def find(self, tags: dict[str, str], include_terminated: bool = False,
             ids: list[str] | None = None) -> list[CloudInstance]:
        states = None if include_terminated else _LIVE_STATES
        found = (self._tagged(tags, states) if ids is None else
                 [d for at in range(0, len(ids), IDS_PER_CALL)
                  for d in self._tagged(tags, states, ids[at:at + IDS_PER_CALL])])
        return [CloudInstance(
            instance_id=inst["InstanceId"], state=inst.get("State", {}).get("Name", ""),
            tags={t["Key"]: t["Value"] for t in inst.get("Tags", [])},
            private_ip=inst.get("PrivateIpAddress", ""), image_id=inst.get("ImageId", ""),
            state_reason=inst.get("StateReason", {}).get("Code", ""),
            launched_at=_when(inst.get("LaunchTime")), subnet_id=inst.get("SubnetId", ""))
            for inst in found]

    # --- capacity reservations and placement groups --------------------------------
    def capacity_reservations(self, ids: list[str]) -> list[CapacityReservation]:
        """The reservations' state and free count, every page of one call for all ids."""
        out: list[CapacityReservation] = []
        for page in pages(self._paginator("describe_capacity_reservations"),
                          CapacityReservationIds=ids):
            for r in page.get("CapacityReservations", []):
                out.append(CapacityReservation(
                    id=r["CapacityReservationId"], instance_type=r.get("InstanceType", ""),
                    availability_zone=r.get("AvailabilityZone", ""),
                    total=int(r.get("TotalInstanceCount", 0)),
                    available=int(r.get("AvailableInstanceCount", 0)),
                    state=r.get("State", ""),
                    reservation_type=INTERRUPTIBLE if r.get("Interruptible")
                    else r.get("ReservationType", "default"),
                    start=_seconds(r.get("StartDate")), end=_seconds(r.get("EndDate")),
                    platform=r.get("InstancePlatform", "Linux/UNIX"),
                    tenancy=r.get("Tenancy", "default")))
        return out

    def image_platforms(self, image_ids: list[str]) -> dict[str, str]:
        """Each image's PlatformDetails (what a reservation's platform is matched against;
        for `check`); an image EC2 does not return is left out."""
        resp = self._call("describe_images", ImageIds=sorted(set(image_ids)))
        return {i["ImageId"]: str(i.get("PlatformDetails", "")) for i in resp.get("Images", [])
                if i.get("PlatformDetails")}

    def instance_shapes(self, types: list[str]) -> dict[str, InstanceShape]:
        """DescribeInstanceTypes for these types, every page: vCPUs, memory, GPUs, EFA."""
        out: dict[str, InstanceShape] = {}
        for page in pages(self._paginator("describe_instance_types"),
                          InstanceTypes=sorted(set(types))):
            for t in page.get("InstanceTypes", []):
                gpus = t.get("GpuInfo", {}).get("Gpus", [])
                out[t["InstanceType"]] = InstanceShape(
                    instance_type=t["InstanceType"],
                    vcpus=int(t.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
                    memory_mib=int(t.get("MemoryInfo", {}).get("SizeInMiB", 0)),
                    gpus=sum(int(g.get("Count", 0)) for g in gpus),
                    gpu_name=",".join(sorted({str(g.get("Name", "")) for g in gpus})),
                    efa=bool(t.get("NetworkInfo", {}).get("EfaSupported", False)))
        return out

    def instance_topology(self, instance_ids: list[str]) -> dict[str, NetworkPlace]:
        """DescribeInstanceTopology, 100 ids a call (the API reference's limit on explicit
        ids; MaxResults cannot go with them), each call's pages followed."""
        return self._topology("describe_instance_topology", "InstanceIds", "Instances",
                              "InstanceId", instance_ids)

    def reservation_topology(self, reservation_ids: list[str]) -> dict[str, NetworkPlace]:
        """DescribeCapacityReservationTopology: where each pending or active reservation's
        capacity sits, before anything launches into it (as instance_topology: 100 ids a
        call, no MaxResults with them, pages followed)."""
        return self._topology("describe_capacity_reservation_topology",
                              "CapacityReservationIds", "CapacityReservations",
                              "CapacityReservationId", reservation_ids)

    def _topology(self, call: str, ids_param: str, items: str, id_key: str,
                  ids: list[str]) -> dict[str, NetworkPlace]:
        out: dict[str, NetworkPlace] = {}
        for i in range(0, len(ids), TOPOLOGY_IDS_PER_CALL):
            token: str | None = None
            while True:
                r = self._call(call, **{ids_param: ids[i:i + TOPOLOGY_IDS_PER_CALL]},
                               **({"NextToken": token} if token else {}))
                for t in r.get(items, []):
                    nodes = tuple(str(n) for n in t.get("NetworkNodes") or ())
                    if nodes and t.get(id_key):
                        out[str(t[id_key])] = NetworkPlace(
                            nodes, str(t.get("CapacityBlockId") or ""))
                token = r.get("NextToken")
                if not token:
                    break
        return out

    def subnet_zones(self, subnets: list[str]) -> dict[str, str]:
        resp = self._call("describe_subnets", SubnetIds=subnets)
        return {s["SubnetId"]: s.get("AvailabilityZone", "") for s in resp.get("Subnets", [])}

    def ensure_placement_group(self, name: str, tags: dict[str, str]) -> None:
        """A cluster placement group of this name, created (tagged) if it does not exist."""
        try:
            self._call("describe_placement_groups", GroupNames=[name])
            return
        except CloudError as e:
            if e.code not in ("InvalidPlacementGroup.Unknown", "InvalidGroup.NotFound"):
                raise
        try:
            self._call("create_placement_group", GroupName=name, Strategy="cluster",
                       TagSpecifications=[{"ResourceType": "placement-group", "Tags": [
                           {"Key": k, "Value": v} for k, v in tags.items()]}])
        except CloudError as e:
            if e.code != "InvalidPlacementGroup.Duplicate":  # made meanwhile: fine
                raise

    def placement_groups(self, tags: dict[str, str]) -> dict[str, dict[str, str]]:
        """Placement groups carrying all of `tags`: name -> its tags."""
        resp = self._call("describe_placement_groups", Filters=[
            {"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()])
        return {g["GroupName"]: {t["Key"]: t["Value"] for t in g.get("Tags", [])}
                for g in resp.get("PlacementGroups", [])}

    def delete_placement_group(self, name: str) -> None:
        self._call("delete_placement_group", GroupName=name)

    def launch_template_data(self, pool: Pool, version: str) -> dict:
        """One version of the pool's launch template, as EC2 stores it (for `check`)."""
        ref = ({"LaunchTemplateId": pool.launch_template.id} if pool.launch_template.id
               else {"LaunchTemplateName": pool.launch_template.name or ""})
        resp = self._call("describe_launch_template_versions", **ref, Versions=[version])
        versions = resp.get("LaunchTemplateVersions", [])
        return dict(versions[0].get("LaunchTemplateData", {})) if versions else {}

    def instance_health(self) -> list[InstanceHealth]:
        """Every running instance's status checks and scheduled events in the region:
        DescribeInstanceStatus, paginated (it has no tag filter, and an id list cannot be
        paginated; the caller keeps its own instances)."""
        out: list[InstanceHealth] = []
        token: str | None = None
        while True:
            r = self._call("describe_instance_status", MaxResults=1000,
                           **({"NextToken": token} if token else {}))
            for st in r.get("InstanceStatuses", []):
                events = tuple(
                    ScheduledEvent(str(e.get("Code", "")), _seconds(e.get("NotBefore")),
                                   str(e.get("Description", "")))
                    for e in st.get("Events", [])
                    # AWS keeps a done or canceled event listed, its description saying so
                    if not str(e.get("Description", "")).startswith(("[Completed]",
                                                                      "[Canceled]")))
                out.append(InstanceHealth(
                    st["InstanceId"], st.get("SystemStatus", {}).get("Status", "ok"),
                    st.get("InstanceStatus", {}).get("Status", "ok"), events))
            token = r.get("NextToken")
            if not token:
                return out
