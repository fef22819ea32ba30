"""In-memory stand-ins for the Slurm and cloud protocols, for fast tests of the reconciler.
`FakeCloud` is held to the EC2 contract (`tests/support/ec2_contract.py`, with the simulator's
EC2 and the real adapter on moto); what it adds are the faults the unit tests inject."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurmscale.audit import Event
from slurmscale.cloud.protocol import CloudError, CloudInstance, FleetSpec, QueueMessage
from slurmscale.config import Config, Pool
from slurmscale.daemon.context import Clock, PassContext, utcnow
from slurmscale.hostlists import expand
from slurmscale.model import (
    CapacityReservation,
    FleetError,
    InstanceHealth,
    JobPriority,
    LaunchedInstance,
    LaunchResult,
    NetworkPlace,
    PriorityWeights,
    QueueJob,
    SlurmNode,
    SlurmReservation,
)
from slurmscale.policy.observe import slurm_time
from slurmscale.sim.ec2_adapter import free_places, network_places, reported
from slurmscale.slurm.protocol import SlurmError

SPOT_RECLAIM = "Server.SpotInstanceTermination"
USER_SHUTDOWN = "Client.UserInitiatedShutdown"


@dataclass
class FakeCloud:
    """Launches what it is asked for unless told to fall short (`give`: at most that many,
    and none below the fleet's minimum, as CreateFleet's MinTargetCapacity) or fail
    (`error`)."""

    give: int | None = None
    error: CloudError | None = None
    error_code: str = "InsufficientInstanceCapacity"
    hidden_extra: bool = False  # like EC2 launching more than its answer lists
    down: CloudError | None = None  # every call fails like this (the endpoint unreachable)
    answers_lost: int = 0  # this many launches happen but their answer never arrives
    instances: dict[str, CloudInstance] = field(default_factory=dict)
    launches: list[dict] = field(default_factory=list)
    fail_launch_no: int | None = None  # this launch (1-based) gives nothing
    reservations: dict[str, CapacityReservation] = field(default_factory=dict)
    describes: int = 0  # capacity reservation reads
    zones: dict[str, str] = field(default_factory=dict)  # subnet -> AZ (default us-east-1a)
    groups: dict[str, dict[str, str]] = field(default_factory=dict)  # placement groups
    # DescribeInstanceStatus: what is not here is a running instance with every check ok
    health: dict[str, InstanceHealth] = field(default_factory=dict)
    health_reads: int = 0
    topology: dict[str, NetworkPlace] = field(default_factory=dict)  # instance -> its place
    reservation_places: dict[str, NetworkPlace] = field(default_factory=dict)
    reservation_topology_reads: list[list[str]] = field(default_factory=list)
    topology_reads: list[list[str]] = field(default_factory=list)
    group_of: dict[str, str] = field(default_factory=dict)  # instance -> its placement group
    in_reservation: dict[str, str] = field(default_factory=dict)  # instance -> reservation
    finds: list[tuple[dict[str, str], bool, list[str] | None]] = field(default_factory=list)
    # (instance type, subnet) overrides with no capacity: a fleet that may also launch on
    # another launches there (EC2 tries the overrides in priority order) and reports an
    # error for each of these it tried; one with only these launches nothing
    sold_out: set[tuple[str, str]] = field(default_factory=set)
    stops: list[list[str]] = field(default_factory=list)  # StopInstances calls
    starts: list[str] = field(default_factory=list)  # StartInstances calls
    refuse_start: set[str] = field(default_factory=set)  # no capacity to start these
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def launch(self, pool: Pool, count: int, min_count: int, client_token: str,
               tags: dict[str, str], spec: FleetSpec | None = None) -> LaunchResult:
        spec = spec or FleetSpec.of(pool)
        self.launches.append({"pool": pool.name, "count": count, "min": min_count,
                              "token": client_token, "tags": dict(tags), "spec": spec})
        self._up()
        if self.error:
            raise self.error
        if spec.placement_group and spec.placement_group not in self.groups:
            raise CloudError("InvalidPlacementGroup.Unknown",
                             f"The Placement Group '{spec.placement_group}' is unknown.")
        if self.fail_launch_no is not None and len(self.launches) == self.fail_launch_no:
            n = 0
        else:
            n = count if self.give is None else min(self.give, count)
            if n < min_count:
                n = 0  # MinTargetCapacity: all of the minimum or nothing
        tried = spec.overrides() or [(spec.instance_types[0], spec.subnets[0])]
        refused = [o for o in tried if o in self.sold_out]
        open_ = [o for o in tried if o not in self.sold_out]
        itype, subnet = open_[0] if open_ else tried[0]
        refused = refused[:tried.index(open_[0])] if open_ else refused
        if not open_:
            n = 0
        lifecycle = "spot" if spec.on_spot(pool) else "on-demand"
        # reserved capacity first (as the EC2 contract says): the named reservations only,
        # or, for a template targeting them, the matching ones and then ordinary on-demand
        slots = self._reserved_slots(itype, spec.reservation_ids or (
            tuple(self.reservations) if spec.reserved else ()))
        if spec.reservation_ids:
            n = min(n, len(slots))
            if n < min_count:
                n = 0
        made = []
        for k in range(count if self.hidden_extra else n):
            iid = f"i-{next(self._ids):08x}"
            self.instances[iid] = CloudInstance(iid, "running", dict(tags), "10.0.0.1", "ami-1")
            if spec.placement_group:
                self.group_of[iid] = spec.placement_group
            if k < len(slots) and k < n:
                self.in_reservation[iid] = slots[k]
            made.append(iid)
        listed = made[:n]
        if self.answers_lost:
            self.answers_lost -= 1
            raise CloudError("ReadTimeoutError", "Read timeout on endpoint URL")
        return LaunchResult(
            instances=tuple(LaunchedInstance(
                i, itype, lifecycle, "ami-1", "10.0.0.1", subnet_id=subnet,
                capacity_reservation_id=self.in_reservation.get(i, "")) for i in listed),
            error_code="" if n == count and not refused else self.error_code,
            error_message="" if n == count and not refused else "no capacity",
            fleet_id="fleet-1", errors=tuple(
                FleetError(self.error_code, t, sn)
                for t, sn in (refused if n == count else [*refused, (itype, subnet)])))

    def capacity_reservations(self, ids: list[str]) -> list[CapacityReservation]:
        self._up()
        self.describes += 1
        unknown = [i for i in ids if i not in self.reservations]
        if unknown:
            raise CloudError("InvalidCapacityReservationId.NotFound",
                             f"The capacity reservation ID '{unknown[0]}' does not exist")
        return [reported(self.reservations[i], self._in) for i in ids]

    def _in(self, rid: str) -> int:
        """Live instances in reservation `rid` (a reservation's `available` as given is what
        it has free before this cloud's launches)."""
        return sum(1 for i, r in self.in_reservation.items()
                   if r == rid and self.instances[i].state != "terminated")

    def _reserved_slots(self, itype: str, ids: tuple[str, ...]) -> list[str]:
        return free_places(self.reservations, self._in, itype, ids)  # (the simulator's rule)

    def subnet_zones(self, subnets: list[str]) -> dict[str, str]:
        self._up()
        return {s: self.zones.get(s, "us-east-1a") for s in subnets}

    def ensure_placement_group(self, name: str, tags: dict[str, str]) -> None:
        self._up()
        self.groups.setdefault(name, dict(tags))

    def placement_groups(self, tags: dict[str, str]) -> dict[str, dict[str, str]]:
        self._up()
        return {n: t for n, t in self.groups.items()
                if all(t.get(k) == v for k, v in tags.items())}

    def delete_placement_group(self, name: str) -> None:
        self._up()
        if name not in self.groups:
            raise CloudError("InvalidPlacementGroup.Unknown",
                             f"The Placement Group '{name}' is unknown.")
        if any(g == name and self.instances[i].state != "terminated"
               for i, g in self.group_of.items()):
            raise CloudError("InvalidPlacementGroup.InUse",
                             f"There are instances in placement group {name}")
        del self.groups[name]

    def instance_topology(self, instance_ids: list[str]) -> dict[str, NetworkPlace]:
        self._up()
        self.topology_reads.append(list(instance_ids))
        return network_places(
            instance_ids, lambda i: i in self.instances and self.instances[i].state == "running",
            self.topology, lambda i: self.in_reservation.get(i, ""), self.reservation_places)

    def reservation_topology(self, reservation_ids: list[str]) -> dict[str, NetworkPlace]:
        self._up()
        self.reservation_topology_reads.append(list(reservation_ids))
        return {r: self.reservation_places[r] for r in reservation_ids
                if r in self.reservation_places and r in self.reservations
                and self.reservations[r].state in ("active", "pending")}

    def instance_health(self) -> list[InstanceHealth]:
        self._up()
        self.health_reads += 1
        return [self.health.get(i.instance_id, InstanceHealth(i.instance_id))
                for i in self.instances.values() if i.state == "running"]

    def _up(self) -> None:
        if self.down is not None:
            raise self.down

    def launched_with(self, tags: dict[str, str]) -> tuple[LaunchedInstance, ...]:
        self._up()
        return tuple(LaunchedInstance(i.instance_id, "p5.48xlarge", "spot", i.image_id,
                                      i.private_ip)
                     for i in sorted(self.instances.values(), key=lambda i: i.instance_id)
                     if i.state in ("pending", "running")
                     and all(i.tags.get(k) == v for k, v in tags.items()))

    def tag(self, instance_id: str, tags: dict[str, str]) -> None:
        self._up()
        # an unknown instance: EC2's client error InvalidInstanceID.NotFound (Amazon EC2 API
        # Reference, "Error codes for the Amazon EC2 API", APIReference/errors-overview.html)
        if instance_id not in self.instances:
            raise CloudError("InvalidInstanceID.NotFound",
                             f"The instance ID '{instance_id}' does not exist")
        self.instances[instance_id].tags.update(tags)

    def terminate(self, instance_ids: list[str]) -> None:
        self._up()
        for i in instance_ids:
            if i in self.instances:  # (one EC2 does not know needs no terminating)
                self._end(i, USER_SHUTDOWN)

    def stop(self, instance_ids: list[str]) -> None:
        self._up()
        self.stops.append(list(instance_ids))
        for i in instance_ids:
            old = self.instances.get(i)
            if old is None:
                raise CloudError("InvalidInstanceID.NotFound",
                                 f"The instance ID '{i}' does not exist")
            if old.state in ("pending", "running"):
                self.instances[i] = replace(old, state="stopped",
                                            state_reason="Client.UserInitiatedShutdown")

    def start(self, instance_id: str) -> None:
        self._up()
        self.starts.append(instance_id)
        if instance_id in self.refuse_start:
            raise CloudError("InsufficientInstanceCapacity", "We currently do not have "
                             "sufficient capacity in the Availability Zone you requested.")
        old = self.instances[instance_id]
        if old.state in ("shutting-down", "terminated"):
            raise CloudError("IncorrectInstanceState", f"The instance '{instance_id}' is not "
                             "in a state from which it can be started.")
        if old.state == "stopped":
            self.instances[instance_id] = replace(old, state="running", state_reason="")

    def reclaim(self, instance_id: str) -> None:
        """AWS takes the spot instance back."""
        self._end(instance_id, SPOT_RECLAIM)

    def _end(self, instance_id: str, why: str) -> None:
        old = self.instances[instance_id]
        if old.state != "terminated":
            self.instances[instance_id] = replace(old, state="terminated", state_reason=why)

    def find(self, tags: dict[str, str], include_terminated: bool = False,
             ids: list[str] | None = None) -> list[CloudInstance]:
        self._up()
        self.finds.append((dict(tags), include_terminated, ids))
        return [i for i in self.instances.values()
                if all(i.tags.get(k) == v for k, v in tags.items())
                and (include_terminated or i.state != "terminated")
                and (ids is None or i.instance_id in ids)]

    def running(self) -> list[CloudInstance]:
        return [i for i in self.instances.values() if i.state == "running"]


@dataclass
class FakeSlurm:
    """Node states as `scontrol show node` strings; drain/undrain/power_down edit them the way
    slurmctld would, so the capacity pass can be run repeatedly against it."""

    addresses: dict[str, tuple[str, str]] = field(default_factory=dict)
    instances: dict[str, tuple[str, str]] = field(default_factory=dict)  # InstanceId/Type
    powered_down: list[tuple[list[str], str]] = field(default_factory=list)
    table: dict[str, SlurmNode] = field(default_factory=dict)
    queue: list[QueueJob] = field(default_factory=list)
    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    resv: dict[str, SlurmReservation] = field(default_factory=dict)
    job_resv: dict[str, str] = field(default_factory=dict)
    busy_reservations: set[str] = field(default_factory=set)  # deletes refused (job runs)
    now_text: str = "2026-11-29T12:00:00"  # what "now" means for StartTime=now
    fail: bool = False
    weights: PriorityWeights | None = None  # priority/basic unless a test sets them
    suspend_exc: str | None = None  # SuspendExcNodes; None: a Slurm that cannot change it
    partitions: dict[str, str] = field(default_factory=dict)  # State where not UP

    def nodes(self, names: list[str] | None = None) -> list[SlurmNode]:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_load_node error: Unable to contact")
        now = slurm_time(self.now_text) or 0.0
        reserved = {n for r in self.resv.values()
                    if (slurm_time(r.start_time) or 0.0) <= now
                    < (slurm_time(r.end_time) or math.inf) for n in r.nodes}
        # RESERVED: in a reservation active now (as slurmctld shows it: the contract)
        return [replace(n, state=n.state + "+RESERVED")
                if n.name in reserved and "RESERVED" not in n.state.split("+") else n
                for n in self.table.values() if names is None or n.name in names]

    def _edit(self, op: str, names: list[str], flags_add: set[str], flags_del: set[str],
              reason: str | None = None) -> None:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_update error: Unable to contact")
        self.calls.append((op, list(names)))
        for name in names:
            n = self.table[name]
            parts = [p for p in n.state.split("+") if p not in flags_del]
            parts += sorted(flags_add - set(parts))
            self.table[name] = replace(n, state="+".join(parts),
                                       reason=n.reason if reason is None else reason)

    def drain(self, names: list[str], reason: str) -> None:
        self._edit("drain", names, {"DRAIN"}, set(), f"{reason} [root@2026-11-29T12:00:00]")

    def undrain(self, names: list[str]) -> None:
        self._edit("undrain", names, set(), {"DRAIN"}, "")

    def power_down(self, names: list[str]) -> None:
        self._edit("power_down", names, {"POWERED_DOWN"}, set())

    def power_up(self, names: list[str]) -> None:
        self._edit("power_up", names, {"POWERING_UP"}, {"POWERED_DOWN"})

    def set_job_partitions(self, job_id: str, partitions: list[str]) -> None:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_update error: Unable to contact")
        self.calls.append(("set_job_partitions", [job_id, ",".join(partitions)]))

    def set_node_address(self, name: str, addr: str, hostname: str) -> None:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_update error: Unable to contact")
        self.addresses[name] = (addr, hostname)
        if name in self.table:
            self.table[name] = replace(self.table[name], addr=addr, hostname=hostname)

    def set_node_addresses(self, entries: list[tuple[str, str, str]]) -> None:
        self.calls.append(("set_node_addresses", [n for n, _, _ in entries]))
        for name, addr, host in entries:
            self.set_node_address(name, addr, host)

    def set_node_instances(self, entries: list[tuple[str, str, str]]) -> bool:
        self.calls.append(("set_node_instances", [n for n, _, _ in entries]))
        self.instances.update({n: (i, t) for n, i, t in entries})
        return True

    def power_down_force(self, names: list[str], reason: str) -> None:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_update error: Unable to contact")
        self.powered_down.append((list(names), reason))
        for name in names:
            if name in self.table:
                self._edit("power_down_force", [name], {"POWERED_DOWN"}, set())

    def reservations(self) -> list[SlurmReservation]:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_load_reservations error")
        return list(self.resv.values())

    def create_reservation(self, name: str, nodes: list[str], users: list[str],
                           duration_s: float) -> None:
        from datetime import datetime, timedelta

        self.calls.append(("create_reservation", [name, *nodes]))
        if name in self.resv:
            raise SlurmError(["scontrol"], 1, "Error creating the reservation: Duplicate "
                             "reservation name")
        start = datetime.fromisoformat(self.now_text)
        self.resv[name] = SlurmReservation(
            name, tuple(nodes), tuple(users), start_time=start.isoformat(timespec="seconds"),
            end_time=(start + timedelta(seconds=duration_s)).isoformat(timespec="seconds"))

    def create_window_reservation(self, name: str, nodes: list[str], users: list[str],
                                  start_s: float | None, end_s: float) -> None:
        from datetime import datetime

        self.calls.append(("create_window_reservation", [name, *nodes]))
        if name in self.resv:
            raise SlurmError(["scontrol"], 1, "Error creating the reservation: Duplicate "
                             "reservation name")
        r = SlurmReservation(
            name, tuple(nodes), tuple(users),
            start_time=self.now_text if start_s is None
            else datetime.fromtimestamp(start_s).isoformat(timespec="seconds"),
            end_time=datetime.fromtimestamp(end_s).isoformat(timespec="seconds"))
        self._refuse_overlap(r)
        self.resv[name] = r

    def _refuse_overlap(self, r: SlurmReservation) -> None:
        """Slurm's rule: no two reservations on one node for overlapping times."""
        def span(x: SlurmReservation) -> tuple[float, float]:
            return slurm_time(x.start_time) or 0.0, slurm_time(x.end_time) or math.inf
        lo, hi = span(r)
        for o in self.resv.values():
            olo, ohi = span(o)
            if o.name != r.name and set(o.nodes) & set(r.nodes) and olo < hi and lo < ohi:
                raise SlurmError(["scontrol"], 1, "Error creating the reservation: "
                                 "Requested nodes are busy")

    def update_window_reservation(self, name: str, nodes: list[str], start_s: float | None,
                                  end_s: float) -> None:
        from datetime import datetime

        self.calls.append(("update_window_reservation", [name, *nodes]))
        old = self.resv.get(name)
        if old is None:
            raise SlurmError(["scontrol"], 1, "Requested reservation is invalid")
        r = replace(
            old, nodes=tuple(nodes),
            start_time=old.start_time if start_s is None
            else datetime.fromtimestamp(start_s).isoformat(timespec="seconds"),
            end_time=datetime.fromtimestamp(end_s).isoformat(timespec="seconds"))
        self._refuse_overlap(r)
        self.resv[name] = r

    def set_reservation_nodes(self, name: str, nodes: list[str]) -> None:
        self.calls.append(("set_reservation_nodes", [name, *nodes]))
        self.resv[name] = replace(self.resv[name], nodes=tuple(nodes))

    def partition_states(self) -> dict[str, str]:
        return {p: self.partitions.get(p, "UP")
                for p in sorted({p for n in self.table.values() for p in n.partitions})}

    def set_partition_state(self, name: str, state: str) -> None:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_update error: Unable to contact")
        self.calls.append(("set_partition_state", [name, state]))
        self.partitions[name] = state

    def delete_reservation(self, name: str) -> None:
        self.calls.append(("delete_reservation", [name]))
        if name not in self.resv:
            raise SlurmError(["scontrol"], 1, "Requested reservation is invalid")
        queued = {j.job_id for j in self.queue}
        if name in self.busy_reservations or any(
                r == name and j in queued for j, r in self.job_resv.items()):
            # as Slurm: a reservation any job points at (pending or running) is kept
            raise SlurmError(["scontrol"], 1, "Requested reservation is in use")
        del self.resv[name]

    def set_job_reservation(self, job_id: str, name: str) -> None:
        self.calls.append(("set_job_reservation", [job_id, name]))
        if any(j.job_id == job_id and j.state != "PENDING" for j in self.queue):
            raise SlurmError(["scontrol"], 1, "Job is no longer pending execution")
        if name and name not in self.resv:
            raise SlurmError(["scontrol"], 1, "Invalid reservation name specified")
        if name:
            self.job_resv[job_id] = name
        else:
            self.job_resv.pop(job_id, None)
        # squeue shows it (as Slurm: the job's Reservation field)
        self.queue = [j._replace(reservation=name) if j.job_id == job_id else j
                      for j in self.queue]

    def jobs_on_node(self, node: str) -> list[str]:
        if self.fail:
            raise SlurmError(["squeue"], 1, "slurm_load_jobs error")
        return [j.job_id for j in self.queue
                if j.state == "RUNNING" and j.nodelist and node in expand(j.nodelist)]

    def reconfigure(self) -> None:
        if self.fail:
            raise SlurmError(["scontrol", "reconfigure"], 1, "slurm_reconfigure error")
        self.calls.append(("reconfigure", []))

    def signal_job(self, job_id: str, signal: str, full: bool) -> None:
        if self.fail:
            raise SlurmError(["scancel"], 1, "slurm_signal_job error")
        self.calls.append(("signal", [job_id, signal, "full" if full else "batch"]))

    def requeue(self, job_id: str, node: str = "") -> None:
        self.calls.append(("requeue", [job_id]))
        self.queue = [j._replace(state="PENDING", reason="BeginTime", nodelist="")
                      if j.job_id == job_id else j for j in self.queue]

    def pending_jobs(self) -> list[QueueJob]:
        return [j for j in self.queue if j.state == "PENDING"]

    def active_jobs(self) -> list[QueueJob]:
        return [j for j in self.queue if j.state in {"PENDING", "CONFIGURING", "RUNNING"}]

    def ended_jobs(self) -> list[QueueJob]:
        if self.fail:
            raise SlurmError(["squeue"], 1, "slurm_load_jobs error")
        return [j for j in self.queue if j.state not in {"PENDING", "CONFIGURING", "RUNNING"}
                and j.nodelist and j.start_time]

    def priorities(self) -> list[JobPriority]:
        """sprio: the pending jobs' priorities (no factors known here)."""
        return [JobPriority(j.job_id, p, float(j.priority), 0.0, 0.0, 0.0, 0.0, 0.0)
                for j in self.queue if j.state == "PENDING" for p in j.partitions]

    def priority_weights(self) -> PriorityWeights | None:
        return self.weights

    def suspend_exc_nodes(self) -> str | None:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_load_ctl_conf error: Unable to contact")
        return self.suspend_exc

    def set_suspend_exc_nodes(self, value: str) -> None:
        if self.fail:
            raise SlurmError(["scontrol"], 1, "slurm_update error: Unable to contact")
        self.calls.append(("suspend_exc", [value]))
        self.suspend_exc = value

    def job(self, job_id: int | str) -> dict[str, str]:
        return next(({"JobId": j.job_id, "JobState": j.state} for j in self.queue
                     if j.job_id == str(job_id)), {})


@dataclass
class FakeQueue:
    """An SQS queue's receive/delete, holding message bodies until deleted."""

    bodies: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def receive(self, max_messages: int = 10) -> list[QueueMessage]:
        live = [(str(i), b) for i, b in enumerate(self.bodies) if str(i) not in self.deleted]
        return [QueueMessage(r, b) for r, b in live[:max_messages]]

    def delete(self, receipt: str) -> None:
        self.deleted.append(receipt)


def slurm_down(directory: Path) -> Path:
    """A `slurm.bin_dir` whose commands fail at once, as a controller that refuses does: the
    daemon's passes end quickly, so a test of its loop or API does not wait on Slurm."""
    down = directory / "slurm-down"
    down.mkdir()
    for tool in ("scontrol", "squeue", "sprio", "sinfo"):
        (down / tool).write_text("#!/bin/sh\necho 'slurm_load: down' >&2\nexit 1\n")
        (down / tool).chmod(0o755)
    return down


def pass_context(cfg: Config, store: Any, slurm: Any, event: Event = lambda *_a, **_k: None,
                 cloud: Any = None, clock: Clock | None = None,
                 queue: Any = None) -> PassContext[Any]:
    """What the Reconciler gives each pass (one constructor style), for a pass built alone:
    EC2 a `FakeCloud` unless given, the daemon's clock unless given."""
    return PassContext(cfg, store, slurm, FakeCloud() if cloud is None else cloud,
                       utcnow if clock is None else clock, event, queue)
