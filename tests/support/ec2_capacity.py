"""What moto lacks of EC2's capacity model, served by the test proxy in EC2's XML shapes (the
daemon's botocore parses them): capacity reservations and placement groups.

Reservations follow AWS's documented behaviour for EC2 Fleet: a fleet with
`OnDemandOptions.CapacityReservationOptions.UsageStrategy = use-capacity-reservations-first`
whose launch template version targets a Capacity Reservation resource group (read from moto,
as EC2 reads the template) fills the group's matching reservations (instance type and AZ)
first and launches the remainder as ordinary on-demand; a reservation's free count is its
total less the live instances in it (an instance leaves it when terminated);
DescribeInstances shows `capacityReservationId` on instances inside one.
A reserved-capacity fleet (DefaultTargetCapacityType reserved-capacity, ReservedCapacityOptions
naming the reservation types and ids: the API reference's ReservedCapacityOptionsRequest) goes
into the named reservations of a named type and the fleet's instance type only, as many as
they have free, the rest an insufficient-capacity error, no fallback (the user guide's
interruptible-reservation tutorial). An interruptible reservation says so
(`interruptible`) in DescribeCapacityReservations.
Capacity Blocks (the user guide's Capacity Blocks tutorial and "Monitor Capacity Blocks
using EventBridge"): a block's state follows its window (scheduled, active, expired); a fleet
into blocks (DefaultTargetCapacityType reserved-capacity, ReservedCapacityOptions naming
capacity-block and the ids, as the API reference's ReservedCapacityOptionsRequest has it; or
the older capacity-block type whose template version targets one block) gets an
insufficient-capacity error before the start, at most the named blocks' free count after it
(the excess as an insufficient-capacity error beside the instances, no on-demand fallback),
and EC2 begins terminating the block's instances `termination_lead_s` (AWS: 30 minutes)
before its end.
DescribeInstanceTopology (the API reference, and the user guide's "How Amazon EC2 topology
works": each running instance's network nodes, top-down): as the test lays the network out by
node name, else, for an instance in a reservation, the reservation's place.
DescribeCapacityReservationTopology (the API reference: where a pending or active
reservation's capacity sits before a launch, with the UltraServer's Capacity Block id for an
UltraServer type): as the test lays each reservation out. Placement groups:
create (tags), describe (by name or tag filter), delete (refused while an instance of it is
live), and a fleet naming an unknown group is refused, as EC2 does.
Not reproduced: `open` reservations matched by attributes alone, instance platform and tenancy
matching at launch (a reservation shows both; `check` compares them), reservation expiry on
its own (a test sets `state`), partition/spread strategies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from xml.sax.saxutils import escape

import boto3

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
ACCOUNT = "123456789012"


@dataclass
class Reservation:
    id: str
    instance_type: str
    total: int
    availability_zone: str = "us-east-1a"
    resource_group_arn: str = ""  # the group a launch template targets it through
    state: str = "active"
    reservation_type: str = "default"
    start: datetime = field(default_factory=lambda: datetime.now(UTC))
    end: datetime | None = None
    members: set[str] = field(default_factory=set)  # live instances in it
    interruptible: bool = False  # an interruptible ODCR (its owner may reclaim it)
    platform: str = "Linux/UNIX"
    tenancy: str = "default"
    # DescribeCapacityReservationTopology: where its capacity sits (network nodes top-down;
    # the UltraServer's Capacity Block id for an UltraServer type); its instances sit there
    network_nodes: tuple[str, ...] = ()
    ultraserver: str = ""

    @property
    def block(self) -> bool:
        return self.reservation_type == "capacity-block"

    def state_now(self) -> str:
        if not self.block or self.state in ("cancelled", "failed", "payment-failed"):
            return self.state  # (a block's state follows its window unless it ended early)
        now = datetime.now(UTC)
        return ("scheduled" if now < self.start else "expired" if self.end and now >= self.end
                else "active")

    @property
    def available(self) -> int:
        if self.state_now() != "active":
            return 0
        return max(0, self.total - len(self.members))


@dataclass
class Group:
    name: str
    strategy: str
    tags: dict[str, str]
    id: str
    members: set[str] = field(default_factory=set)


def _type_of(r: Reservation) -> str:
    """The reservation's type as ReservedCapacityOptions.ReservationTypes names it."""
    return ("capacity-block" if r.block else "interruptible-capacity-reservation"
            if r.interruptible else "on-demand-capacity-reservation")


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _indexed(params: dict[str, str], prefix: str) -> list[str]:
    """Values of `prefix.1`, `prefix.2`, ... in order (EC2's query list encoding)."""
    out, i = [], 1
    while f"{prefix}.{i}" in params:
        out.append(params[f"{prefix}.{i}"])
        i += 1
    return out


def _response(action: str, body: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{NS}">'
            f"<requestId>00000000-0000-0000-0000-0000000000c1</requestId>{body}"
            f"</{action}Response>").encode()


def _error(code: str, message: str) -> tuple[int, bytes]:
    return 400, (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
                 f"<Code>{code}</Code><Message>{escape(message)}</Message></Error></Errors>"
                 "<RequestID>00000000-0000-0000-0000-0000000000c2</RequestID></Response>"
                 ).encode()


def _tags(tags: dict[str, str]) -> str:
    return "<tagSet>" + "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value>"
                                "</item>" for k, v in tags.items()) + "</tagSet>"


@dataclass
class CapacityModel:
    """Reservations and placement groups; `upstream()` gives moto's URL (for templates)."""

    upstream: Callable[[], str]
    reservations: dict[str, Reservation] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    taken_back: list[str] = field(default_factory=list)  # block instances EC2 terminated
    # EC2 begins terminating a block's instances this long before its end (30 minutes in
    # AWS's user guide; a test that compresses its clock compresses this with it)
    termination_lead_s: float = 1800.0
    # DescribeInstanceTopology: the network nodes (top-down) of the instance running as a
    # node (its slurmscale:node tag), as the test lays the network out
    topology_by_node: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def add(self, r: Reservation) -> Reservation:
        self.reservations[r.id] = r
        return r

    # --- answered here, never forwarded -------------------------------------------------
    SERVED = frozenset({"DescribeCapacityReservations", "CreatePlacementGroup",
                        "DescribePlacementGroups", "DeletePlacementGroup",
                        "DescribeInstanceTopology", "DescribeCapacityReservationTopology"})

    def serve(self, action: str, params: dict[str, str]) -> tuple[int, bytes]:
        with self.lock:
            return getattr(self, f"_{action}")(params)

    def _DescribeCapacityReservations(self, params: dict[str, str]) -> tuple[int, bytes]:  # noqa: N802
        ids = _indexed(params, "CapacityReservationId") or list(self.reservations)
        unknown = [i for i in ids if i not in self.reservations]
        if unknown:
            return _error("InvalidCapacityReservationId.NotFound",
                          f"The capacity reservation ID '{unknown[0]}' does not exist")
        items = []
        for i in ids:
            r = self.reservations[i]
            end = (f"<endDate>{_iso(r.end)}</endDate><endDateType>limited</endDateType>"
                   if r.end else "<endDateType>unlimited</endDateType>")
            items.append(
                f"<item><capacityReservationId>{r.id}</capacityReservationId>"
                f"<ownerId>{ACCOUNT}</ownerId><capacityReservationArn>arn:aws:ec2:us-east-1:"
                f"{ACCOUNT}:capacity-reservation/{r.id}</capacityReservationArn>"
                f"<instanceType>{r.instance_type}</instanceType>"
                f"<instancePlatform>{escape(r.platform)}</instancePlatform>"
                f"<availabilityZone>{r.availability_zone}</availabilityZone>"
                f"<tenancy>{r.tenancy}</tenancy>"
                f"<totalInstanceCount>{r.total}</totalInstanceCount>"
                f"<availableInstanceCount>{r.available}</availableInstanceCount>"
                "<ebsOptimized>true</ebsOptimized><ephemeralStorage>false</ephemeralStorage>"
                f"<state>{r.state_now()}</state><startDate>{_iso(r.start)}</startDate>{end}"
                "<instanceMatchCriteria>targeted</instanceMatchCriteria>"
                f"<createDate>{_iso(r.start)}</createDate><tagSet/>"
                f"<reservationType>{r.reservation_type}</reservationType>"
                f"<interruptible>{'true' if r.interruptible else 'false'}</interruptible>"
                "</item>")
        return 200, _response("DescribeCapacityReservations",
                              f"<capacityReservationSet>{''.join(items)}"
                              "</capacityReservationSet>")

    def _DescribeInstanceTopology(self, params: dict[str, str]) -> tuple[int, bytes]:  # noqa: N802
        """The API reference's DescribeInstanceTopology: at most 100 explicit ids, MaxResults
        not with them; an instance not running, or without a laid-out node, has no network
        nodes (AWS: a type without topology, a state other than running). No paging here."""
        ids = _indexed(params, "InstanceId")
        if len(ids) > 100 or (ids and "MaxResults" in params):
            return _error("InvalidParameterCombination" if ids and "MaxResults" in params
                          else "InvalidParameterValue",
                          "at most 100 instance IDs, and not with MaxResults")
        found = [i for r in self._ec2().describe_instances(
            **({"InstanceIds": ids} if ids else {}))["Reservations"] for i in r["Instances"]]
        items = []
        home = {m: r for r in self.reservations.values() for m in r.members}
        for i in found:
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            r = home.get(i["InstanceId"])
            nodes: tuple[str, ...] = ()
            ultra = ""
            if i["State"]["Name"] == "running":  # its own place, else its reservation's
                nodes = self.topology_by_node.get(tags.get("slurmscale:node", ""), ())
                if not nodes and r is not None:
                    nodes, ultra = r.network_nodes, r.ultraserver
            items.append(
                f"<item><instanceId>{i['InstanceId']}</instanceId>"
                f"<instanceType>{i['InstanceType']}</instanceType>"
                + (f"<groupName>{escape(i['Placement']['GroupName'])}</groupName>"
                   if i["Placement"].get("GroupName") else "")
                + "<networkNodeSet>" + "".join(f"<item>{n}</item>" for n in nodes)
                + "</networkNodeSet>"
                f"<availabilityZone>{i['Placement']['AvailabilityZone']}</availabilityZone>"
                "<zoneId>use1-az1</zoneId>"
                + (f"<capacityBlockId>{ultra}</capacityBlockId>" if ultra else "") + "</item>")
        return 200, _response("DescribeInstanceTopology",
                              f"<instanceSet>{''.join(items)}</instanceSet>")

    def _DescribeCapacityReservationTopology(self, params: dict[str, str]  # noqa: N802
                                             ) -> tuple[int, bytes]:
        """The API reference's DescribeCapacityReservationTopology: a pending or active
        reservation's network nodes (none in any other state), at most 100 explicit ids,
        MaxResults not with them; an unknown id is an error as in DescribeCapacityReservations.
        No paging here."""
        ids = _indexed(params, "CapacityReservationId")
        if len(ids) > 100 or (ids and "MaxResults" in params):
            return _error("InvalidParameterCombination" if ids and "MaxResults" in params
                          else "InvalidParameterValue",
                          "at most 100 capacity reservation IDs, and not with MaxResults")
        unknown = [i for i in ids if i not in self.reservations]
        if unknown:
            return _error("InvalidCapacityReservationId.NotFound",
                          f"The capacity reservation ID '{unknown[0]}' does not exist")
        items = []
        for r in (self.reservations[i] for i in ids or list(self.reservations)):
            state = r.state_now()
            nodes = r.network_nodes if state in ("active", "pending") else ()
            items.append(
                f"<item><capacityReservationId>{r.id}</capacityReservationId>"
                + (f"<capacityBlockId>{r.ultraserver}</capacityBlockId>" if r.ultraserver
                   else "")
                + f"<state>{state}</state><instanceType>{r.instance_type}</instanceType>"
                "<networkNodeSet>" + "".join(f"<item>{n}</item>" for n in nodes)
                + "</networkNodeSet><availabilityZoneId>use1-az1</availabilityZoneId>"
                f"<availabilityZone>{r.availability_zone}</availabilityZone></item>")
        return 200, _response("DescribeCapacityReservationTopology",
                              f"<capacityReservationSet>{''.join(items)}"
                              "</capacityReservationSet>")

    def _CreatePlacementGroup(self, params: dict[str, str]) -> tuple[int, bytes]:  # noqa: N802
        name = params.get("GroupName", "")
        if name in self.groups:
            return _error("InvalidPlacementGroup.Duplicate",
                          f"The placement group '{name}' already exists.")
        tags = {}
        j = 1
        while f"TagSpecification.1.Tag.{j}.Key" in params:
            tags[params[f"TagSpecification.1.Tag.{j}.Key"]] = params.get(
                f"TagSpecification.1.Tag.{j}.Value", "")
            j += 1
        g = self.groups[name] = Group(name, params.get("Strategy", "cluster"), tags,
                                      f"pg-{len(self.groups) + 1:017x}")
        return 200, _response("CreatePlacementGroup",
                              f"<return>true</return>{self._item(g, 'placementGroup')}")

    def _item(self, g: Group, tag: str = "item") -> str:
        return (f"<{tag}><groupName>{escape(g.name)}</groupName><state>available</state>"
                f"<strategy>{g.strategy}</strategy><groupId>{g.id}</groupId>"
                f"<groupArn>arn:aws:ec2:us-east-1:{ACCOUNT}:placement-group/{g.name}</groupArn>"
                f"{_tags(g.tags)}</{tag}>")

    def _DescribePlacementGroups(self, params: dict[str, str]) -> tuple[int, bytes]:  # noqa: N802
        names = _indexed(params, "GroupName")
        unknown = [n for n in names if n not in self.groups]
        if unknown:
            return _error("InvalidPlacementGroup.Unknown",
                          f"The Placement Group '{unknown[0]}' is unknown.")
        found = [self.groups[n] for n in names] if names else list(self.groups.values())
        i = 1
        while f"Filter.{i}.Name" in params:
            key = params[f"Filter.{i}.Name"].removeprefix("tag:")
            values = _indexed(params, f"Filter.{i}.Value")
            found = [g for g in found if g.tags.get(key) in values]
            i += 1
        return 200, _response("DescribePlacementGroups", "<placementGroupSet>" + "".join(
            self._item(g) for g in found) + "</placementGroupSet>")

    def _DeletePlacementGroup(self, params: dict[str, str]) -> tuple[int, bytes]:  # noqa: N802
        name = params.get("GroupName", "")
        g = self.groups.get(name)
        if g is None:
            return _error("InvalidPlacementGroup.Unknown",
                          f"The Placement Group '{name}' is unknown.")
        if g.members:
            return _error("InvalidPlacementGroup.InUse",
                          f"There are instances in placement group {name}")
        del self.groups[name]
        return 200, _response("DeletePlacementGroup", "<return>true</return>")

    # --- around forwarded calls ---------------------------------------------------------
    def reserved_fleet(self, params: dict[str, str]) -> tuple[list[Reservation], int] | None:
        """A fleet into reservations by id (reserved-capacity: blocks, ODCRs, interruptible
        ones, of the types it names; or the older capacity-block type through its template):
        those reservations, and how many instances they can have now (an instance must match
        a reservation's type; no fallback to other capacity)."""
        tcs = "TargetCapacitySpecification."
        kind = params.get(tcs + "DefaultTargetCapacityType")
        rco = "ReservedCapacityOptions."
        if kind == "reserved-capacity":
            ids = _indexed(params, rco + "CapacityReservationTarget.CapacityReservationId")
            types = set(_indexed(params, rco + "ReservationType"))
        elif kind == "capacity-block":
            ids = [self._template_target(params).get("CapacityReservationId", "")]
            types = {"capacity-block"}
        else:
            return None
        itype = params.get("LaunchTemplateConfigs.1.Overrides.1.InstanceType", "")
        named = [self.reservations[i] for i in ids if i in self.reservations]
        if not named:
            raise LookupError(f"no capacity reservation named: {ids}")
        usable = [r for r in named if _type_of(r) in types
                  and (not itype or r.instance_type == itype)]
        with self.lock:
            free = sum(r.available for r in usable)
            return usable, min(free, int(params.get(tcs + "TotalTargetCapacity", 0)))

    def expire_blocks(self) -> list[str]:
        """Instances of blocks within `termination_lead_s` of their end: EC2 terminates them
        (the caller does)."""
        with self.lock:
            out = []
            now = datetime.now(UTC)
            for r in self.reservations.values():
                if (r.block and r.end is not None and r.members
                        and (r.end - now).total_seconds() <= self.termination_lead_s):
                    out += sorted(r.members)
                    r.members.clear()
            self.taken_back += out
            return out

    def refuse_fleet(self, params: dict[str, str]) -> tuple[int, bytes] | None:
        """A fleet naming a placement group that does not exist is refused, as EC2 does."""
        group = params.get("LaunchTemplateConfigs.1.Overrides.1.Placement.GroupName")
        if group and group not in self.groups:
            return _error("InvalidPlacementGroup.Unknown",
                          f"The Placement Group '{group}' is unknown.")
        return None

    def fleet_launched(self, params: dict[str, str], instance_ids: list[str],
                       named: list[Reservation] | None = None) -> None:
        """Put a fleet's new instances in its placement group and into the reservations it
        named by id (in that order), or, reservations first, into those its template version
        targets."""
        with self.lock:
            group = params.get("LaunchTemplateConfigs.1.Overrides.1.Placement.GroupName")
            if group in self.groups:
                self.groups[group].members.update(instance_ids)
            if named:
                left = list(instance_ids)
                for r in named:
                    take, left = left[:r.available], left[r.available:]
                    r.members.update(take)
                return
            if params.get("OnDemandOptions.CapacityReservationOptions.UsageStrategy") != \
                    "use-capacity-reservations-first":
                return
        target, itype, az = self._fleet_target(params)
        with self.lock:
            left = list(instance_ids)
            for r in self.reservations.values():
                if (r.resource_group_arn and r.resource_group_arn == target
                        and r.state == "active" and r.instance_type == itype
                        and r.availability_zone == az):
                    take, left = left[:r.available], left[r.available:]
                    r.members.update(take)

    def _ec2(self):  # type: ignore[no-untyped-def]
        return boto3.client("ec2", region_name="us-east-1", endpoint_url=self.upstream(),
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def _template_target(self, params: dict[str, str]) -> dict[str, str]:
        """The CapacityReservationTarget of the fleet's launch template version, as EC2 reads
        it from the template."""
        spec = "LaunchTemplateConfigs.1.LaunchTemplateSpecification."
        ref = ({"LaunchTemplateId": params[spec + "LaunchTemplateId"]}
               if spec + "LaunchTemplateId" in params
               else {"LaunchTemplateName": params.get(spec + "LaunchTemplateName", "")})
        version = self._ec2().describe_launch_template_versions(
            **ref, Versions=[params.get(spec + "Version", "$Default")]
        )["LaunchTemplateVersions"][0]
        return dict(version["LaunchTemplateData"].get("CapacityReservationSpecification", {})
                    .get("CapacityReservationTarget", {}))

    def _fleet_target(self, params: dict[str, str]) -> tuple[str, str, str]:
        target = self._template_target(params)
        o = "LaunchTemplateConfigs.1.Overrides.1."
        subnet = params.get(o + "SubnetId", "")
        az = (self._ec2().describe_subnets(SubnetIds=[subnet])["Subnets"][0]
              ["AvailabilityZone"] if subnet else "")
        return (target.get("CapacityReservationResourceGroupArn", ""),
                params.get(o + "InstanceType", ""), az)

    def terminated(self, params: dict[str, str]) -> None:
        gone = set(_indexed(params, "InstanceId"))
        with self.lock:
            for holder in [*self.reservations.values(), *self.groups.values()]:
                holder.members -= gone

    def in_reservation(self) -> dict[str, str]:
        """instance id -> the reservation it runs in."""
        with self.lock:
            return {i: r.id for r in self.reservations.values() for i in r.members}
