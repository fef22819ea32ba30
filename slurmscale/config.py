"""slurmscale's configuration: one YAML file, validated by pydantic.

The hooks read a compiled view of it (hookview.py) and load it whole only when that view is
missing or stale; commands and the daemon load it whole (config_file.py reads the file).
Every validation error names the key path and the value that was refused.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from slurmscale.config_base import _NAME, BLOCK_TERMINATION_LEAD_S, _Strict
from slurmscale.config_base import (
    BLOCK_WARNING_LEAD_S as BLOCK_WARNING_LEAD_S,
)
from slurmscale.config_base import AddressSource as AddressSource
from slurmscale.config_base import CapacityType as CapacityType
from slurmscale.config_base import ConfigError as ConfigError
from slurmscale.config_base import Placement as Placement
from slurmscale.config_base import default_block_margin_s as default_block_margin_s
from slurmscale.config_pool import INTERRUPTION_NOTICE_S as INTERRUPTION_NOTICE_S
from slurmscale.config_pool import CapacityReservations as CapacityReservations
from slurmscale.config_pool import GraceSignal as GraceSignal
from slurmscale.config_pool import LaunchTemplate as LaunchTemplate
from slurmscale.config_pool import Pool as Pool
from slurmscale.config_pool import PoolPolicy as PoolPolicy
from slurmscale.config_pool import SignalTarget as SignalTarget
from slurmscale.config_pool import SpotSettings as SpotSettings
from slurmscale.config_pool import WarmPool as WarmPool
from slurmscale.hookview import DEFAULT_SOCKET_PATH, DEFAULT_SPOOL_DIR
from slurmscale.model import ReservationPreference as ReservationPreference
from slurmscale.policy.health import HealthKnobs as _H
from slurmscale.policy.limit_use import Learning
from slurmscale.policy.reservations import ReservationKnobs as _R


class AwsSettings(_Strict):
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")] = "us-east-1"

    @field_validator("endpoint_url", "sqs_endpoint_url", "route53_endpoint_url")
    @classmethod
    def _a_url(cls, v: str | None) -> str | None:
        """botocore refuses anything else only when a client is made: a daemon with
        `endpoint_url: "not a url"` stood by for good, a traceback each tick."""
        if v is None:
            return v
        from urllib.parse import urlsplit

        try:
            u = urlsplit(v)
            u.port  # noqa: B018 - (raises on a port that is not a number)
        except ValueError:
            u = None
        if u is None or u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{v!r} is not an http(s) URL (e.g. https://ec2.us-east-1."
                             "amazonaws.com or http://127.0.0.1:5000)")
        return v

    endpoint_url: str | None = None
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    # EC2 caps an instant fleet's MinTargetCapacity at 1,000: a larger gang is launched as
    # several fleets of at most this many, all-or-nothing across them.
    max_instances_per_fleet: Annotated[int, Field(ge=1, le=1000)] = 1000
    # The SQS queue an EventBridge rule fills with EC2 events (spot interruption warnings,
    # rebalance recommendations, state changes); unset: no event handling.
    interruption_queue_url: str | None = None
    sqs_endpoint_url: str | None = None  # default: endpoint_url
    # An SSM SecureString holding the cluster's munge key (base64): each node reads it at
    # boot with its instance role (the bootstrap's --munge-key-parameter) and `check` sees
    # that it exists. Unset: the image carries the key. The stack's default is
    # /slurmscale/<cluster_name>/munge-key (docs/aws-stack.md).
    munge_key_parameter: Annotated[str, Field(pattern=r"^/?[A-Za-z0-9_.\-/]{1,1011}$")] \
        | None = None
    route53_endpoint_url: str | None = None  # default: endpoint_url


class DnsSettings(_Strict):
    """Node names that resolve: a Route 53 private hosted zone of the cluster's VPC in which
    the daemon keeps one A record per node with an instance (`<node>.<domain>` -> its private
    IP), written in the pass that writes the node's NodeAddr and deleted in the pass after
    its release; records of names no pool has are never touched. With the VPC's DHCP options
    searching `domain`, `spot-p5-1` resolves on every instance (MPI's and torchrun's
    MASTER_ADDR from `scontrol show hostnames`)."""

    hosted_zone_id: Annotated[str, Field(pattern=r"^(/hostedzone/)?[A-Z0-9]{1,32}$")]
    domain: Annotated[str, Field(pattern=r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*"
                                         r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$")]
    ttl_s: Annotated[int, Field(ge=0, le=86400)] = 60
    # the zone is listed again at least this often (a record changed by someone else, or
    # left by a daemon killed before it deleted it, is put right)
    resync_s: Annotated[float, Field(gt=0, le=86400)] = 300.0


class SlurmSettings(_Strict):
    """How to reach Slurm's commands. `command_prefix` wraps every call (e.g. a chroot or
    ssh to the head node); `conf` is exported as SLURM_CONF when set."""

    bin_dir: str = "/usr/bin"
    sbin_dir: str = "/usr/sbin"
    command_prefix: list[str] = []
    conf: str | None = None
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    # nodes fetch their config from slurmctld (`node-userdata --conf-server`): rendered as
    # SlurmctldParameters=...,enable_configless (slurm.conf allows that key once)
    configless: bool = False
    # Slurm 25.11+: `slurm-conf` renders SlurmctldParameters=...,enable_expedited_requeue, so a
    # job submitted with `--requeue=expedite` that slurmscale requeues (a spot warning, a
    # reclaim, a block's close, a failed node) restarts first, at once, on its previous nodes
    # where they are up (sbatch(1), slurm.conf(5)); false: the jobs' flag does nothing
    expedited_requeue: bool = True
    # the site's own SlurmctldParameters (e.g. [cloud_reg_addrs, reboot_from_controller]):
    # `slurm-conf` renders one line with them and slurmscale's, since Slurm keeps only the
    # last SlurmctldParameters line of slurm.conf
    ctld_parameters: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_]+(=[^,\s]+)?$")]] = []


class PowerSaving(_Strict):
    """Rendered into slurm.conf by `slurmscale slurm-conf` so the two never disagree.

    slurmscale releases idle nodes itself (each pool's policy.max_idle_s at the latest), so
    Slurm's SuspendTime is only the backstop for a daemon that is down: it must be longer.
    Before Slurm 23.02 it must also outlast reservations.max_hold_s (Slurm powers down idle
    reserved nodes; 23.02+ lets the daemon exclude them at run time): `slurmscale check`
    knows the running Slurm and says so."""

    suspend_time: Annotated[int, Field(ge=1)] = 6000
    suspend_timeout: Annotated[int, Field(ge=1)] = 120
    resume_timeout: Annotated[int, Field(ge=1)] = 900
    resume_rate: Annotated[int, Field(ge=0)] = 0
    suspend_rate: Annotated[int, Field(ge=0)] = 0


_L = Learning()


class LimitUseAuto(_Strict):
    """How `limit_use: auto` is learned (policy/limit_use.py): this quantile of run time /
    time limit over the jobs that ended in the last `window_days`, within [floor, ceiling];
    1.0 until a pool has `min_jobs` of them; learned again every `every_s`."""

    quantile: Annotated[float, Field(gt=0, lt=1)] = _L.quantile
    window_days: Annotated[float, Field(gt=0, le=365)] = _L.window_s / 86400
    min_jobs: Annotated[int, Field(ge=1)] = _L.min_jobs
    floor: Annotated[float, Field(gt=0, le=1)] = _L.floor
    ceiling: Annotated[float, Field(gt=0, le=1)] = _L.ceiling
    every_s: Annotated[float, Field(ge=1)] = _L.every_s  # learned again this often

    @model_validator(mode="after")
    def _ordered(self) -> LimitUseAuto:
        if self.floor > self.ceiling:
            raise ValueError(f"floor ({self.floor:g}) is above ceiling ({self.ceiling:g})")
        return self

    def learning(self) -> Learning:
        return Learning(self.quantile, self.window_days * 86400, self.min_jobs, self.floor,
                        self.ceiling, self.every_s)


class ReservationSettings(_Strict):
    """Reservations that accumulate nodes for large pending gangs (docs/policy.md); the one
    copy of the defaults is the planner's (ReservationKnobs)."""

    enabled: bool = _R.enabled
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]*-$", max_length=40)] = _R.prefix
    min_gang_nodes: Annotated[int, Field(ge=2)] = _R.min_gang_nodes
    accumulate_after_s: Annotated[float, Field(ge=0)] = _R.accumulate_after_s
    per_pool: Annotated[int, Field(ge=1, le=16)] = _R.per_pool
    hold_budget_gpu_hours: Annotated[float, Field(gt=0)] = _R.hold_budget_gpu_hours
    max_hold_s: Annotated[float, Field(gt=0)] = _R.max_hold_s
    end_margin_s: Annotated[float, Field(ge=0)] = _R.end_margin_s
    drain_busy: bool = _R.drain_busy
    # the share of its time limit a job typically runs here (sacct: Elapsed / Timelimit): a
    # hold is taken only where the nodes it drains should free within max_hold_s, reckoned
    # as this share of their running jobs' remaining limits (1: the limits are run out).
    # auto: learned per pool from the jobs the daemon recorded (limit_use_auto says how)
    limit_use: Annotated[float, Field(gt=0, le=1)] | Literal["auto"] = _R.limit_use
    limit_use_auto: LimitUseAuto = LimitUseAuto()


class CapacityBlockSettings(_Strict):
    """Capacity-block pools (docs/capacity.md): outside its blocks' windows a pool's nodes sit
    in Slurm reservations named `prefix` + pool name (+ -before / -after[-N]), so jobs pend and
    Slurm starts none whose time limit runs past a block's end less `end_margin_s`; jobs still
    running then are requeued and the nodes powered down before EC2 takes the block back."""

    prefix: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]*-$", max_length=40)] = (
        "slurmscale-block-")
    # EC2 begins terminating a block's instances this long before its end (AWS's figure,
    # BLOCK_TERMINATION_LEAD_S): change it only where a test compresses the clock.
    termination_lead_s: Annotated[float, Field(ge=0)] = BLOCK_TERMINATION_LEAD_S
    # default: termination_lead_s + power_saving.suspend_timeout + 300 s (time to requeue and
    # power down cleanly before EC2's terminations begin), and at least termination_lead_s +
    # 600 s (EC2's Expiration Warning): 40 minutes with AWS's lead
    end_margin_s: Annotated[float, Field(ge=0)] | None = None


class CapacitySettings(_Strict):
    """After an insufficient-capacity error a pool's offerings are unavailable for a TTL that
    doubles with each repeat (capped), persisted in the store."""

    unavailable_ttl_s: Annotated[float, Field(gt=0)] = 180.0
    max_unavailable_ttl_s: Annotated[float, Field(gt=0)] = 1800.0

    @model_validator(mode="after")
    def _ttl_under_its_cap(self) -> CapacitySettings:
        if self.unavailable_ttl_s > self.max_unavailable_ttl_s:
            raise ValueError(f"unavailable_ttl_s ({self.unavailable_ttl_s:g}) is above "
                             f"max_unavailable_ttl_s ({self.max_unavailable_ttl_s:g})")
        return self


class DaemonSettings(_Strict):
    tick_seconds: Annotated[float, Field(gt=0, le=3600)] = 10.0
    batch_window_seconds: Annotated[float, Field(ge=0, le=300)] = 2.0
    # Who may talk to the local API socket (checked by SO_PEERCRED, besides the file mode
    # 0660): user names or uids. The daemon's own user is always allowed; names that do not
    # exist on this machine are skipped with a warning.
    api_users: list[str | int] = ["root", "slurm"]
    # The group the socket file (mode 0660) belongs to, so that those users' hooks may open
    # it at all: by default the primary group of the first of `api_users` that exists here and
    # is not root (Debian's `slurm`). The daemon must be root or a member of it to set it.
    socket_group: str | None = None
    # An instance tagged with this cluster that no node expects (not in the store as running)
    # is terminated once it is this old: long enough for a launch in flight to be recorded, or
    # replayed with its ClientToken by a restarted daemon.
    leak_grace_s: Annotated[float, Field(ge=0)] = 300.0
    # A cloud node Slurm has up (not powered down, not powering up or down) for which neither
    # EC2 nor the store has an instance this long is powered down (its jobs requeue), so it
    # does not sit DOWN forever taking jobs it cannot run.
    lost_node_grace_s: Annotated[float, Field(ge=0)] = 60.0
    # On SIGTERM the pass in flight gets this long to finish; the daemon then exits 0 either
    # way (slurm_conf/systemd/slurmscale.service's TimeoutStopSec is longer)
    stop_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # PostgreSQL HA: a leader whose lease session has said nothing this long (frozen by a
    # SIGSTOP, a paused VM) is cut off by a standby, which leads in its place, and a pass that
    # runs this long gives its lease up (0: never; the leader's lease asks every sixth of it
    # from a thread of its own). Under EC2's 2-minute spot warning, over a slow EC2 call (a
    # pass normally takes well under a second).
    leader_stale_s: Annotated[float, Field(ge=0, le=3600)] = 60.0

    @model_validator(mode="after")
    def _stale_after_beats(self) -> DaemonSettings:
        if 0 < self.leader_stale_s < 6:
            raise ValueError(f"leader_stale_s {self.leader_stale_s:g} is under 6 s: the "
                             "leader's lease would be cut off between its own beats (0: off)")
        return self


class TopologySettings(_Strict):
    """Slurm's network topology from EC2's (docs/topology.md): each running instance's network
    nodes (DescribeInstanceTopology) rendered as Slurm's topology.conf (tree or block), so
    Slurm places a multi-node job under the fewest network nodes among the nodes that are up.
    `file`: the topology.conf Slurm reads, beside slurm.conf (default: slurm.conf's
    directory); SlurmUser must be able to write it (`slurmscale install` makes it so)."""

    # tree: topology/tree (every release); block: topology/block (Slurm 23.11+), one block
    # per UltraServer (or bottom network node)
    plugin: Literal["tree", "block"] = "tree"
    file: str | None = None
    # EC2 is asked about instances it has not placed yet at most this often (it answers
    # nothing for an instance until it runs, and eventual consistency may lag a launch)
    read_interval_s: Annotated[float, Field(ge=1)] = 30.0
    # slurmctld re-reads topology.conf only on `scontrol reconfigure`: at most this often
    reconfigure_interval_s: Annotated[float, Field(ge=1)] = 60.0


class HealthSettings(_Strict):
    """Unhealthy nodes replaced rather than retried into: a node whose instance fails EC2's
    status checks, that the site's health check drained with a matching reason, or that
    slurmctld has DOWN/NOT_RESPONDING while its instance runs, has its jobs requeued and its
    instance terminated; the node returns powered down, and the next resume gets a fresh
    instance. A node with a scheduled EC2 event (retirement, maintenance) is drained at once
    and replaced once idle, or `event_lead_s` before the event at the latest."""

    # regular expressions searched in a drained (or down) node's reason, e.g. ["NHC", "DCGM",
    # "Xid"]: the site's health check says the hardware is bad. Empty: no drain is ours to act on.
    replace_on_reasons: list[str] = list(_H.replace_on_reasons)
    # how long a node must stay unhealthy by Slurm's account (drained with a matching reason,
    # DOWN or NOT_RESPONDING) before it is replaced: a slurmd restarting is not a dead node
    grace_s: Annotated[float, Field(ge=0)] = _H.grace_s
    # DescribeInstanceStatus for the cluster's instances (status checks, scheduled events) at
    # most this often; 0: never (scheduled changes may still arrive on the interruption queue)
    status_interval_s: Annotated[float, Field(ge=0)] = 60.0
    # a scheduled event's node still running jobs is replaced (jobs requeued) this long
    # before the event's earliest start
    event_lead_s: Annotated[float, Field(ge=0)] = _H.event_lead_s
    # a node replaced `max_replacements` times within `window_s` is left drained for an admin
    # (the fault is not the instance: an image, a driver, a check that always fails)
    max_replacements: Annotated[int, Field(ge=1)] = _H.max_replacements
    window_s: Annotated[float, Field(gt=0)] = 86400.0
    # `slurmscale slurm-conf` renders HealthCheckProgram (and its interval) with this program
    check_program: str | None = None
    check_interval_s: Annotated[int, Field(ge=1)] = 300

    @field_validator("replace_on_reasons")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p:
                raise ValueError("an empty pattern would match every drain reason")
            try:
                re.compile(p)
            except re.error as e:
                raise ValueError(f"{p!r} is not a regular expression: {e}") from None
        return v

    @field_validator("check_program")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"{v!r} must be an absolute path (slurmd runs it)")
        return v


class MetricsSettings(_Strict):
    """The Prometheus endpoint (http://address:port/metrics); port 0 turns it off."""

    address: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0

    @field_validator("address")
    @classmethod
    def _an_ip_address(cls, v: str) -> str:
        import ipaddress

        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not an IP address to serve on (127.0.0.1, ::1, "
                             "0.0.0.0)") from None
        return v


class Config(_Strict):
    cluster_name: Annotated[str, Field(pattern=_NAME, max_length=64)]
    aws: AwsSettings = AwsSettings()
    store_url: str = "sqlite:////var/lib/slurmscale/slurmscale.db"
    # The store's password, kept out of this file (which SlurmUser's hooks must read): a file
    # only its owner may read, holding the password alone. Used with a store_url without one.
    store_password_file: str | None = None
    socket_path: str = DEFAULT_SOCKET_PATH
    spool_dir: str = DEFAULT_SPOOL_DIR
    log_file: str | None = "/var/log/slurmscale/slurmscale.log"

    @field_validator("spool_dir", "hooks_dir", "hook_log_file", "log_file",
                     "store_password_file")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        """Hooks run in whatever directory slurmctld is in: a relative path means nothing."""
        if v is not None and not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute path")
        return v

    @field_validator("socket_path")
    @classmethod
    def _a_socket_file(cls, v: str) -> str:
        """A file path the daemon can bind and a hook (run in any directory) can reach:
        absolute, naming a file, within AF_UNIX's 107 bytes (unix(7))."""
        name = v.rsplit("/", 1)[-1]
        if not v.startswith("/") or name in ("", ".", ".."):
            raise ValueError(f"{v!r} is not an absolute path to a socket file "
                             "(e.g. /run/slurmscale/slurmscale.sock)")
        if len(os.fsencode(v)) > 107:
            raise ValueError(f"{v!r} is longer than a Unix socket's 107 bytes")
        return v
    log_format: Literal["text", "json"] = "text"  # json: one object per line
    hook_log_file: str = "/var/log/slurmscale/hooks.log"
    hooks_dir: str = "/usr/local/lib/slurmscale/resume_suspend"
    node_address: AddressSource = AddressSource.PRIVATE_IP
    slurm: SlurmSettings = SlurmSettings()
    daemon: DaemonSettings = DaemonSettings()
    power_saving: PowerSaving = PowerSaving()
    reservations: ReservationSettings = ReservationSettings()
    capacity: CapacitySettings = CapacitySettings()
    capacity_blocks: CapacityBlockSettings = CapacityBlockSettings()
    metrics: MetricsSettings = MetricsSettings()
    health: HealthSettings = HealthSettings()
    dns: DnsSettings | None = None  # node names in Route 53 (docs/node-image.md, "Names")
    topology: TopologySettings | None = None  # EC2's network topology into Slurm's
    # USD per instance-hour by instance type and capacity type, for the reports' cost
    # estimate, e.g. {p5.48xlarge: {on-demand: 98.32, spot: 39.0}}; unpriced types show no cost
    prices: dict[str, dict[CapacityType, Annotated[float, Field(ge=0)]]] = {}
    pools: Annotated[list[Pool], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique(self) -> Config:
        names = [p.name for p in self.pools]
        prefixes = [p.node_prefix for p in self.pools]
        for a in prefixes:  # (a node name must say its one pool at a glance, and in Slurm)
            for b in prefixes:
                if a != b and b.startswith(a):
                    raise ValueError(f"node_prefix {a!r} is the start of node_prefix {b!r}: "
                                     "each pool's prefix must not begin another's")
        partitions = [p.partition for p in self.pools]  # (a pool is found by its partition)
        for field, values in (("name", names), ("node_prefix", prefixes),
                              ("partition", partitions)):
            dup = {v for v in values if values.count(v) > 1}
            if dup:
                raise ValueError(f"two pools share {field} {sorted(dup)[0]!r}")
        by_name = {p.name: p for p in self.pools}
        for p in self.pools:
            if "spot" in p.model_fields_set and (p.capacity_type is not CapacityType.SPOT
                                                 or p.fallback_pool is None):
                raise ValueError(f"pool {p.name!r}: spot settings apply only to a spot pool "
                                 "with a fallback_pool")
            if p.fallback_pool is None:
                continue
            fb = by_name.get(p.fallback_pool)
            if fb is None or fb is p:
                raise ValueError(f"pool {p.name!r} fallback_pool {p.fallback_pool!r} is not "
                                 "another pool of this config")
            if fb.capacity_type is not CapacityType.ON_DEMAND:
                raise ValueError(f"pool {p.name!r} fallback_pool {p.fallback_pool!r} must be "
                                 f"an on-demand pool (it is {fb.capacity_type.value})")
        if self.capacity_blocks.prefix.startswith(self.reservations.prefix) or \
                self.reservations.prefix.startswith(self.capacity_blocks.prefix):
            raise ValueError(f"capacity_blocks.prefix ({self.capacity_blocks.prefix!r}) and "
                             f"reservations.prefix ({self.reservations.prefix!r}) must not "
                             "overlap: each names its own reservations")
        for p in self.pools:
            if self.power_saving.suspend_time <= p.policy.max_idle_s:
                raise ValueError(
                    f"power_saving.suspend_time ({self.power_saving.suspend_time}) must be "
                    f"longer than pool {p.name!r} policy.max_idle_s ({p.policy.max_idle_s:g}): "
                    "slurmscale releases idle nodes itself and SuspendTime is the backstop "
                    "for when its daemon is down")
        return self

    def topology_file(self) -> str | None:
        """Where Slurm reads the topology slurmscale writes (None: no topology)."""
        if self.topology is None:
            return None
        if self.topology.file is not None:
            return self.topology.file
        return os.path.join(os.path.dirname(self.slurm.conf or "/etc/slurm/slurm.conf"),
                            "topology.conf")

    def block_end_margin_s(self) -> float:
        cb = self.capacity_blocks
        if cb.end_margin_s is not None:
            return cb.end_margin_s
        return default_block_margin_s(cb.termination_lead_s, self.power_saving.suspend_timeout)

    def database_url(self) -> str:
        """store_url with the password from store_password_file, for the daemon and the CLI
        to connect with; never logged (logs render the URL with the password hidden)."""
        if self.store_password_file is None:
            return self.store_url
        from sqlalchemy.engine.url import make_url

        path = Path(self.store_password_file)
        try:
            mode = path.stat().st_mode
            secret = path.read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read store_password_file {path}: {e.strerror}") from None
        if mode & 0o077:
            raise ConfigError(f"store_password_file {path} is readable or writable by others "
                              f"(mode {mode & 0o777:04o}); refusing it: chmod 600 {path}")
        return make_url(self.store_url).set(password=secret).render_as_string(
            hide_password=False)

    def pool_of(self, node: str) -> Pool | None:
        # asked for every node several times a pass: remembered (the config never changes)
        known = self._pool_by_node
        if node in known:
            return known[node]
        found = next((p for p in self.pools if p.owns(node)), None)
        if len(known) < 1_000_000:
            known[node] = found
        return found

    @functools.cached_property
    def _pool_by_node(self) -> dict[str, Pool | None]:
        return {}

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)
