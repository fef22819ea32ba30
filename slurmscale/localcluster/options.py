"""What a local cluster is made of: its pools and the settings of Slurm, the daemon and the
simulated EC2 it runs with (`cluster.py` builds it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PoolSpec:
    name: str
    prefix: str
    max_nodes: int
    gpus: int = 8
    capacity_type: str = "spot"
    instance_type: str = "p5.48xlarge"
    cpus: int = 2
    policy: dict[str, Any] = field(default_factory=dict)  # overrides of the pool's policy
    fallback_pool: str | None = None
    spot: dict[str, Any] = field(default_factory=dict)  # the pool's spot settings
    # other keys of the pool's config (capacity_reservations, placement_group, ...)
    extra: dict[str, Any] = field(default_factory=dict)
    launch_template_version: str = "1"  # a test may add versions (e.g. targeting a block)


@dataclass
class ClusterOptions:
    pools: list[PoolSpec] = field(default_factory=lambda: [
        PoolSpec("gpu-spot", "spot-", 8), PoolSpec("gpu-od", "od-", 2,
                                                     capacity_type="on-demand")])
    boot_delay: float = 3.0
    # slurmscale releases nodes idle for max_idle (or min_idle when no reuse is forecast);
    # SuspendTime is Slurm's backstop and must be longer.
    min_idle: float = 5.0
    max_idle: float = 10.0
    suspend_time: int = 30
    resume_timeout: int = 180
    tick_seconds: float = 2.0
    aws_max_attempts: int = 2  # botocore's standard retries (jittered exponential backoff)
    batch_window: float = 2.0
    slurm_root: str = "/"
    # slurmctld's SlurmUser, and the user the daemon runs as (the shipped unit's): the hooks
    # run as it, as on a production cluster. Debian's packages make `slurm` (uid 64030, the
    # same in the chroots). "root" only for what a root SlurmUser itself is to show.
    slurm_user: str = "slurm"
    # Maps the moto URL to the EC2 endpoint the daemon uses (e.g. a fault-injecting proxy).
    daemon_ec2_endpoint: Callable[[str], str] | None = None
    start_daemon: bool = True
    slurm_conf_extra: list[str] = field(default_factory=list)  # e.g. MaxJobCount=50000
    # overrides of the config's `reservations:`; max_hold_s defaults to just under
    # suspend_time (the config requires SuspendTime to outlast any hold)
    reservations: dict[str, Any] = field(default_factory=dict)
    capacity: dict[str, Any] = field(default_factory=dict)  # overrides of `capacity:`
    daemon: dict[str, Any] = field(default_factory=dict)  # overrides of `daemon:`
    daemon_env: dict[str, str] = field(default_factory=dict)  # the first daemon's extra env
    # a command the daemons start under, as root, before the switch to SlurmUser (as systemd
    # sets up a unit's sandbox before User=): tests/support/unit_sandbox.py
    daemon_prefix: list[str] = field(default_factory=list)
    # Slurm keeps a requeued job ineligible for cred_expire seconds (default 120)
    cred_expire: int | None = None
    slurmd_timeout: int = 120  # slurmctld sets a silent node DOWN after this
    store_url: str | None = None  # default: SQLite under the cluster's directory
    metrics: bool = False  # serve Prometheus metrics on a free loopback port (metrics_url)
    extra_config: dict[str, Any] = field(default_factory=dict)  # top-level config keys
    aws: dict[str, Any] = field(default_factory=dict)  # overrides of `aws:`
    moto_url: str | None = None  # an EC2 server already running (the dev cluster's); else own
    tag_timeout: float = 60.0  # the node bootstrap's wait for its node tag
    # slurmd fetches its config from slurmctld (SlurmctldParameters=enable_configless) instead
    # of reading the cluster's slurm.conf
    configless: bool = False
    # AWS's clock (moto's answers and launch times) this many seconds ahead of this host's
    # (libfaketime): a host clock that is off true time, as the daemon must read AWS's times
    aws_clock_ahead_s: int = 0
    # the AWS side from the stack `slurmscale aws-template` renders (deployed into moto's
    # CloudFormation, written into the config by `config from-stack`: localcluster/stack.py)
    # instead of a launch template and queue made here
    aws_stack: bool = False
