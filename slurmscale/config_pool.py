"""A pool's configuration (config.py has the whole of it): its instances, launch template,
reservations, policy, spot settings and the signal a job gets before its node goes."""

from __future__ import annotations

import re
import signal as signal_module
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from slurmscale.config_base import (
    _NAME,
    CapacityType,
    Placement,
    _Strict,
)
from slurmscale.hostlists import owns
from slurmscale.model import GangNetwork, ReservationPreference
from slurmscale.policy.model import Mode, StepSizing
from slurmscale.policy.model import PoolKnobs as _K


def pinned_version(v: Any) -> str:
    s = str(v).strip()
    if not s.isascii() or not s.isdigit() or int(s) < 1:
        raise ValueError(
            f"launch template version must be a pinned version number, got {v!r} "
            "($Latest/$Default would let a pool's fleet drift between AMIs)"
        )
    return s


class LaunchTemplate(_Strict):
    """A launch template pinned to one version: the AMI and GPU driver live on the host,
    so a pool's fleet must be uniform and `$Latest`/`$Default` would let it drift."""

    name: str | None = None
    id: str | None = None
    version: str

    @field_validator("version", mode="before")
    @classmethod
    def _pinned(cls, v: Any) -> str:
        return pinned_version(v)

    @model_validator(mode="after")
    def _one_ref(self) -> LaunchTemplate:
        if (self.name is None) == (self.id is None):
            raise ValueError("give exactly one of launch_template.name or launch_template.id")
        return self


class CapacityReservations(_Strict):
    """A pool's capacity reservations: On-Demand Capacity Reservations, interruptible ones
    (EC2 reads which from each id), or in a `capacity-block` pool its Capacity Blocks.
    `ids` are what slurmscale reads each pass (state and free count) to decide whether a gang
    fits whole, and what a gang that does is launched into: a reserved-capacity fleet naming
    those ids (docs/capacity.md). `launch_template_version`, for sites that target their
    ODCRs through a resource group: a version of the pool's template that targets them (the
    fleet then fills them first, `use-capacity-reservations-first`); the pool's own version
    must not. A capacity-block pool has none: a gang launches only inside a block, whole."""

    ids: Annotated[list[Annotated[str, Field(pattern=r"^cr-[0-9a-f]{8,17}$")]],
                   Field(min_length=1, max_length=100)]
    preference: ReservationPreference = ReservationPreference.USE_FIRST
    launch_template_version: str | None = None
    # Reserved capacity is paid whether used or not: an idle node on it is kept (releasing it
    # saves nothing and a relaunch costs a boot) unless this is true.
    release_idle: bool = False
    # A gang with a job whose runs an interruptible reservation's owner took back this many
    # times launches on the pool's other capacity, not into interruptible reservations again
    # (as a spot pool's max_preemptions moves a job to its fallback).
    max_reclaims: Annotated[int, Field(ge=1)] = 2
    # What a gang's reserved nodes must share, by EC2's reservation topology (read with
    # DescribeCapacityReservationTopology, docs/topology.md): any, leaf, spine, ultraserver.
    # A gang is never split across it; one that fits in no group goes to normal capacity.
    gang_network: GangNetwork = GangNetwork.ANY

    @field_validator("launch_template_version", mode="before")
    @classmethod
    def _pinned(cls, v: Any) -> str | None:
        return None if v is None else pinned_version(v)

    @field_validator("ids")
    @classmethod
    def _unique_ids(cls, v: list[str]) -> list[str]:
        dup = sorted({i for i in v if v.count(i) > 1})
        if dup:
            raise ValueError(f"capacity reservation {dup[0]!r} is listed twice")
        return v


# the knobs PoolKnobs holds as enums, the config as their values
_KNOB_ENUMS: dict[str, type[StrEnum]] = {"mode": Mode, "step_sizing": StepSizing}


class PoolPolicy(_Strict):
    """The capacity policy's knobs for one pool (docs/policy.md explains each), with the
    policy's own defaults (PoolKnobs: the one copy, for the daemon and the simulator alike)."""

    mode: Literal["immediate", "governed"] = _K.mode.value
    step_nodes: Annotated[int, Field(ge=1)] = _K.step_nodes
    step_sizing: Literal["pending", "fixed"] = _K.step_sizing.value
    queue_gpu_hours: Annotated[float, Field(ge=0)] = _K.queue_gpu_hours
    sustained_s: Annotated[float, Field(ge=0)] = _K.sustained_s
    cooldown_s: Annotated[float, Field(ge=0)] = _K.cooldown_s
    max_wait_s: Annotated[float, Field(gt=0)] = _K.max_wait_s
    max_scale_down_per_cycle: Annotated[int, Field(ge=1)] = _K.max_scale_down_per_cycle
    min_idle_s: Annotated[float, Field(ge=0)] = _K.min_idle_s
    max_idle_s: Annotated[float, Field(ge=0)] = _K.max_idle_s
    reuse_window_s: Annotated[float, Field(gt=0)] = _K.reuse_window_s
    reuse_horizon_s: Annotated[float, Field(ge=0)] = _K.reuse_horizon_s
    default_time_limit_s: Annotated[float, Field(gt=0)] = _K.default_time_limit_s

    @model_validator(mode="after")
    def _idle_order(self) -> PoolPolicy:
        if self.min_idle_s > self.max_idle_s:
            raise ValueError(f"min_idle_s ({self.min_idle_s:g}) must not exceed max_idle_s "
                             f"({self.max_idle_s:g})")
        return self

    def knob_values(self) -> dict[str, Any]:
        """The knobs as PoolKnobs takes them (its enums for the choices): the daemon's knobs
        and `simulate --pool/--knob`'s come from this one conversion."""
        return self.model_dump() | {f: e(getattr(self, f)) for f, e in _KNOB_ENUMS.items()}

    @classmethod
    def of_knobs(cls, k: _K) -> PoolPolicy:
        """The policy whose knobs are `k`'s (the simulator configures its daemon from the
        knobs it simulates): `knob_values` the other way."""
        return cls(**{f: getattr(k, f) for f in cls.model_fields}
                   | {f: getattr(k, f).value for f in _KNOB_ENUMS})


class SpotSettings(_Strict):
    """What a spot pool with an on-demand `fallback_pool` does about interruptions
    (docs/spot.md): the buffer kept warm in the fallback pool, and which jobs are moved there."""

    # Share of the GPUs in use (this pool and its fallback) kept powered up on demand, and a
    # floor in nodes; 0 and 0 turn the buffer off.
    on_demand_buffer: Annotated[float, Field(ge=0, le=1)] = 0.2
    warm_on_demand_nodes: Annotated[int, Field(ge=0)] = 0
    # A job preempted this many times is moved to the fallback partition only.
    max_preemptions: Annotated[int, Field(ge=1)] = 2
    # A job that may only run on spot, pending this long while the pool has no capacity, gets
    # the fallback partition added, if the admin allows rewriting users' partitions.
    allow_partition_rewrite: bool = False
    fallback_after_s: Annotated[float, Field(gt=0)] = 900.0


class SignalTarget(StrEnum):
    BATCH = "batch"  # the batch shell only (`scancel --batch`): where a trap catches it
    FULL = "full"  # the batch shell and every step (`scancel --full`)


# EC2 user guide, "Spot Instance interruption notices": the warning comes two minutes before
# EC2 stops or terminates the instance; the same for an interruptible Capacity Reservation's
# reclaim ("Interruptible Capacity Reservations": "two minutes")
INTERRUPTION_NOTICE_S = 120.0


class GraceSignal(_Strict):
    """The signal a job on an interrupted node gets before slurmscale requeues it, so it can
    save its work in the time the warning gives (docs/spot.md, "The job's signal"). Opt-in
    per pool: an untrapped SIGUSR1 terminates a bash batch script, so signalling jobs that
    do not expect it would turn a requeue into a FAILED job (Slurm's own `--signal` is
    opt-in for the same reason)."""

    signal: Annotated[str, Field(pattern=r"^(SIG)?[A-Z0-9]+$")] = "USR1"
    target: SignalTarget = SignalTarget.BATCH
    # requeued this long before EC2's deadline, if still running: Slurm's KillWait (30 s by
    # default) and the job's completion must fit in it
    margin_s: Annotated[float, Field(ge=0, lt=INTERRUPTION_NOTICE_S)] = 40.0

    @field_validator("signal")
    @classmethod
    def _known(cls, v: str) -> str:
        name = v if v.startswith("SIG") else f"SIG{v}"
        if name not in signal_module.Signals.__members__ or name in ("SIGKILL", "SIGSTOP"):
            raise ValueError(f"not a signal a job can catch: {v!r}")
        return name.removeprefix("SIG")


class WarmPool(_Strict):
    """Stopped instances kept for a pool's next resumes (docs/operations.md, "Warm pools"):
    a released node's instance is stopped instead of terminated while the pool holds fewer
    than `size`, and a resume starts stopped ones (StartInstances) before it launches. A
    stopped instance costs its EBS volumes, not its compute (EC2 user guide, "Stop and start
    Amazon EC2 instances"), and skips a first boot's work; EC2 keeps no capacity for it, so
    a start may be refused (InsufficientInstanceCapacity): the gang then launches cold."""

    size: Annotated[int, Field(ge=1, le=10000)]
    # a stopped instance older than this (since its last start) is terminated: its image
    # and the node's software age while it waits
    max_age_s: Annotated[float, Field(gt=0)] = 7 * 86400.0
    # what one stopped instance costs an hour (its EBS volumes): `report` prices the
    # stopped instance-hours with it; left out, it shows the hours alone
    stopped_usd_per_hour: Annotated[float, Field(ge=0)] | None = None


class Pool(_Strict):
    """One Slurm partition of identical CLOUD nodes of one capacity type."""

    name: Annotated[str, Field(pattern=_NAME)]
    partition: Annotated[str, Field(pattern=_NAME)]
    node_prefix: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*[a-z-]$")]
    max_nodes: Annotated[int, Field(ge=1, le=10000)]
    min_nodes: Annotated[int, Field(ge=0)] = 0
    gpus_per_node: Annotated[int, Field(ge=1, le=64)] = 8
    # the node line's CPUs= and RealMemory=; left out, `slurm-conf` reads them from EC2
    # (DescribeInstanceTypes: vCPUs, 95 % of the memory) and `check` holds given ones to it
    cpus_per_node: Annotated[int, Field(ge=1)] | None = None
    real_memory_mb: Annotated[int, Field(ge=1)] | None = None
    gpu_type: Annotated[str, Field(pattern=_NAME)] | None = None
    instance_types: Annotated[list[str], Field(min_length=1)]
    capacity_type: CapacityType = CapacityType.SPOT
    launch_template: LaunchTemplate
    subnets: Annotated[list[str], Field(min_length=1)]
    features: list[str] = []
    # Launch to slurmd registered, for this pool's AMI and type: `slurmscale check` wants
    # ResumeTimeout longer than this
    boot_time_s: Annotated[float, Field(gt=0)] = 300.0
    # An instance running this long without its slurmd registered gets a fresh instance for
    # its node (default: boot_time_s + 120), at most max_boot_retries times per power-up;
    # then the node is powered down with the boot error and its job requeues (docs/node-image.md)
    join_timeout_s: Annotated[float, Field(gt=0)] | None = None
    max_boot_retries: Annotated[int, Field(ge=0, le=10)] = 2
    policy: PoolPolicy = PoolPolicy()
    # An on-demand pool that takes this pool's work while its capacity is unavailable: jobs
    # submitted to both partitions (-p spot,on-demand) run there meanwhile.
    fallback_pool: str | None = None
    spot: SpotSettings = SpotSettings()
    # the jobs on a node EC2 is taking back (spot, an interruptible reservation) get this
    # signal and the warning's time, less a margin, before their requeue; None: requeued at
    # once
    grace_signal: GraceSignal | None = None
    capacity_reservations: CapacityReservations | None = None
    # A cluster placement group every gang of this pool launches into (created, tagged with
    # the cluster, if missing), or `placement: per-gang`: a group of its own per gang.
    placement_group: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")] \
        | None = None
    placement: Placement | None = None
    # The launch template gives the nodes EFA interfaces: `slurmscale check` verifies it.
    efa: bool = False
    # stopped instances kept for the next resumes (on-demand pools only): see WarmPool
    warm_pool: WarmPool | None = None

    @field_validator("instance_types")
    @classmethod
    def _instance_types(cls, v: list[str]) -> list[str]:
        for t in v:
            if not re.fullmatch(r"[a-z0-9-]+\.[a-z0-9]+", t):
                raise ValueError(f"not an EC2 instance type: {t!r}")
        dup = sorted({t for t in v if v.count(t) > 1})
        if dup:
            raise ValueError(f"instance type {dup[0]!r} is listed twice")
        return v

    @model_validator(mode="after")
    def _bounds(self) -> Pool:
        if self.gpu_type is not None and not self.gpus_per_node:
            raise ValueError(f"gpu_type {self.gpu_type!r} on a pool without GPUs "
                             "(gpus_per_node 0)")
        if self.min_nodes > self.max_nodes:
            raise ValueError(
                f"min_nodes ({self.min_nodes}) is larger than max_nodes ({self.max_nodes})"
            )
        if self.placement_group is not None and self.placement is not None:
            raise ValueError(f"give placement_group ({self.placement_group!r}) or placement "
                             f"({self.placement.value!r}), not both")
        cr = self.capacity_reservations
        self._warm_pool_fits()
        if self.capacity_type is CapacityType.CAPACITY_BLOCK:
            if cr is None:
                raise ValueError("a capacity-block pool needs capacity_reservations.ids (its "
                                 "blocks' reservation ids)")
            if cr.launch_template_version is not None:
                raise ValueError("a capacity-block pool's fleets name the open blocks by id, "
                                 "with its own launch_template version; drop "
                                 "capacity_reservations.launch_template_version "
                                 f"({cr.launch_template_version})")
            if "preference" in cr.model_fields_set and cr.preference is not \
                    ReservationPreference.ONLY:
                raise ValueError("a capacity-block pool launches only into its blocks: "
                                 f"capacity_reservations.preference {cr.preference.value!r} "
                                 "does not apply (leave it out)")
        if cr is not None and cr.gang_network is not GangNetwork.ANY and \
                cr.launch_template_version is not None:
            raise ValueError(
                f"capacity_reservations.gang_network {cr.gang_network.value!r} needs the "
                "gang's fleet to name the reservations it fits in by id; a template that "
                "targets them through a resource group lets EC2 choose (drop "
                "capacity_reservations.launch_template_version)")
        if cr is not None and cr.launch_template_version == self.launch_template.version:
            raise ValueError(
                f"capacity_reservations.launch_template_version ({cr.launch_template_version})"
                " must differ from launch_template.version: the pool's own version launches "
                "the gangs that do not fit the reservations, and must not target them")
        return self

    def _warm_pool_fits(self) -> None:
        """A warm pool only where EC2 can stop the pool's instances and keep them useful."""
        if self.warm_pool is None:
            return
        if self.capacity_type is not CapacityType.ON_DEMAND:
            # an instant fleet's spot instances come from one-time requests, which EC2 will
            # not stop (EC2 user guide, "Stop a Spot Instance": persistent requests only)
            raise ValueError(f"warm_pool needs capacity_type on-demand, not "
                             f"{self.capacity_type.value!r}: EC2 stops only on-demand "
                             "instances launched this way")
        if self.capacity_reservations is not None:
            raise ValueError("warm_pool on a pool with capacity_reservations: reserved "
                             "capacity is paid for running or not, so a stopped instance "
                             "would only add its volumes' cost")
        if self.placement is Placement.PER_GANG:
            raise ValueError("warm_pool with placement per-gang: a stopped instance stays "
                             "in its gang's placement group; give a pool-wide "
                             "placement_group instead")
        if self.warm_pool.size > self.max_nodes:
            raise ValueError(f"warm_pool.size ({self.warm_pool.size}) is larger than "
                             f"max_nodes ({self.max_nodes})")

    def join_timeout(self) -> float:
        return self.join_timeout_s if self.join_timeout_s is not None else self.boot_time_s + 120

    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}{i}" for i in range(1, self.max_nodes + 1)]

    def node_range(self) -> str:
        return f"{self.node_prefix}[1-{self.max_nodes}]" if self.max_nodes > 1 else (
            f"{self.node_prefix}1"
        )

    def owns(self, node: str) -> bool:
        return owns(self.node_prefix, self.max_nodes, node)
