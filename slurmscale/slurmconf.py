"""Render the slurm.conf and gres.conf lines that must agree with slurmscale's config.

Every pool becomes CLOUD nodes plus one partition; the power-saving settings point Slurm at
slurmscale's hooks. Rendering from one source is what keeps slurm.conf and the config from
disagreeing about node names, GPU counts or timeouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from slurmscale.config import CapacityType, Config, Pool
from slurmscale.model import InstanceShape
from slurmscale.slurm.kv import EXPEDITED_REQUEUE
from slurmscale.slurmconf_site import GENERATED, LISTS, merge, replaced, site_items

HOOKS = ("resume", "suspend", "resume-fail")
LIST_KEYS = frozenset(LISTS)


# Slurm 25.05 added SchedulerParameters=requeue_on_resume_failure (slurm.conf(5)): batch jobs
# of a node that misses ResumeTimeout are requeued by Slurm itself, even those that asked
# for no requeue.
REQUEUE_ON_RESUME_FAILURE = (25, 5)
# topology/block came with Slurm 23.11 (topology.conf(5))
BLOCK_PLUGIN = (23, 11)
# scontrol(1), reconfigure: from 23.11 it starts new daemons on the new config, nodes added or
# removed included; before, "the slurmctld daemon and all slurmd daemons must also be
# restarted if nodes are added to or removed from the cluster" (22.05's slurmctld stops with
# `fatal: MaxNodeCount has changed`).
RECONFIGURE_NODES = (23, 11)


def apply_nodes(release: tuple[int, int] | None) -> str:
    """What makes the running Slurm take node lines added or removed, for this release."""
    if release is not None and release >= RECONFIGURE_NODES:
        return "`scontrol reconfigure` applies them (23.11+)"
    rel = f"Slurm {release[0]}.{release[1]:02d}" if release else "Slurm before 23.11"
    return (f"restart slurmctld (and the slurmd running): {rel} takes added or removed nodes "
            "only on a restart; `scontrol reconfigure` stops slurmctld")


def ctld_parameters(cfg: Config, release: tuple[int, int] | None = None) -> list[str]:
    """The one SlurmctldParameters line's values: slurmscale's, then the site's, once each;
    `release`: what that Slurm has besides (None: only what every release from 22.05 takes)."""
    want = ["idle_on_node_suspend", *(["enable_configless"] if cfg.slurm.configless else []),
            *(["enable_expedited_requeue"] if expedites(cfg, release) else []),
            *cfg.slurm.ctld_parameters]
    return list(dict.fromkeys(want))


def expedites(cfg: Config, release: tuple[int, int] | None) -> bool:
    """Whether the lines for `release` let jobs ask for an expedited requeue."""
    return cfg.slurm.expedited_requeue and release is not None and release >= EXPEDITED_REQUEUE


def sized_by_ec2(p: Pool) -> bool:
    """The pool leaves CPUs or RealMemory to EC2's shape of its first instance type."""
    return p.cpus_per_node is None or p.real_memory_mb is None


def needs_shapes(cfg: Config) -> list[str]:
    """The instance types whose EC2 shape the node lines need (`sized_by_ec2`)."""
    return sorted({p.instance_types[0] for p in cfg.pools if sized_by_ec2(p)})


def node_size(p: Pool, shapes: dict[str, InstanceShape] | None
              ) -> tuple[int | None, int | None, str]:
    """A pool's CPUs and RealMemory for its node line (None: left to Slurm's default), and
    a comment saying where each came from."""
    shape = (shapes or {}).get(p.instance_types[0])
    cpus = p.cpus_per_node if p.cpus_per_node is not None else (shape.vcpus if shape else None)
    mem = (p.real_memory_mb if p.real_memory_mb is not None
           else (shape.schedulable_memory_mb if shape else None))
    said = []
    if p.cpus_per_node is None and shape:
        said.append(f"CPUs {cpus} (its vCPUs)")
    if p.real_memory_mb is None and shape:
        said.append(f"RealMemory {mem} (95 % of {shape.memory_mib} MiB)")
    why = (f"# pool {p.name}: {' and '.join(said)} from EC2's DescribeInstanceTypes for "
           f"{shape.instance_type}" if said and shape else "")
    return cpus, mem, why


def render_slurm_conf(cfg: Config, node_extra: Callable[[Pool], str] | None = None,
                      release: tuple[int, int] | None = None,
                      shapes: dict[str, InstanceShape] | None = None,
                      site: Mapping[str, list[str]] | None = None) -> str:
    """`release`: the Slurm it is for ((major, minor); None: any, 22.05 on): what a newer
    Slurm does itself is rendered for it. `shapes`: EC2's instance types, for the node sizes
    a pool leaves out (`needs_shapes`); without one, CPUs and RealMemory are left out too.
    `site`: the site's own slurm.conf values (`slurmconf_site.read_site`): the comma lists
    Slurm keeps one value of are rendered as the site's values plus slurmscale's, and a
    one-value parameter slurmscale replaces is named in a comment above its line."""
    ps = cfg.power_saving
    hooks = Path(cfg.hooks_dir)
    site = site or {}

    def keep(key: str, ours: list[str]) -> str:
        return f"{key}={','.join(merge(site_items(site, key), ours))}"

    lines = [
        f"{GENERATED} for cluster {cfg.cluster_name}.",
        "# Regenerate after changing slurmscale.yaml or the site's own slurm.conf values",
        "# (the comma lists below keep them); do not edit by hand. Include this file as the",
        "# last line of slurm.conf: Slurm keeps a parameter's last value.",
        f"ResumeProgram={hooks / 'slurmscale-resume'}",
        f"SuspendProgram={hooks / 'slurmscale-suspend'}",
        f"ResumeFailProgram={hooks / 'slurmscale-resume-fail'}",
        "# slurmscale powers idle nodes down itself (its policy); SuspendTime is only the",
        "# backstop for when its daemon is down.",
        f"SuspendTime={ps.suspend_time}",
        f"SuspendTimeout={ps.suspend_timeout}",
        f"ResumeTimeout={ps.resume_timeout}",
        f"ResumeRate={ps.resume_rate}",
        f"SuspendRate={ps.suspend_rate}",
        "# Cloud nodes come and go: do not build a slurmd forwarding tree over them.",
        "TreeWidth=65533",
        "# A node powered down while idle returns to idle~, not down"
        + ("; nodes fetch their config from slurmctld." if cfg.slurm.configless else "."),
        "# Slurm keeps only the last SlurmctldParameters line: this is the one, with the site's",
        "# own values (its slurm.conf's, and slurm.ctld_parameters in slurmscale.yaml).",
        *(["# Slurm 25.11+: a job submitted with --requeue=expedite that slurmscale requeues",
           "# (spot, reclaim, block close) restarts first (slurm.expedited_requeue)."]
          if expedites(cfg, release) else []),
        keep("SlurmctldParameters", ctld_parameters(cfg, release)),
        "# Jobs on a node whose launch failed or whose spot instance is interrupted are",
        "# requeued (slurmscale runs scontrol requeue), never failed.",
        "JobRequeue=1",
        "# Powered-down cloud nodes shown (sinfo, scontrol), with the site's own PrivateData.",
        keep("PrivateData", ["cloud"]),
    ]
    if release is not None and release >= REQUEUE_ON_RESUME_FAILURE:
        lines += [
            "# Slurm 25.05+: batch jobs of a node that misses ResumeTimeout are requeued by",
            "# Slurm itself (slurmscale's ResumeFailProgram does it on older releases); the",
            "# site's own SchedulerParameters kept.",
            keep("SchedulerParameters", ["requeue_on_resume_failure"]),
        ]
    h = cfg.health
    if h.check_program:
        lines += [
            "# The site's node health check (health.check_program): a failing check drains the",
            "# node with a reason health.replace_on_reasons matches, and slurmscale replaces it.",
            f"HealthCheckProgram={h.check_program}",
            f"HealthCheckInterval={h.check_interval_s}",
            "# every node state (a busy GPU node too), spread over the interval",
            "HealthCheckNodeState=ANY,CYCLE",
        ]
    if cfg.topology is not None:
        lines += [
            "# EC2's network topology (topology: in slurmscale.yaml): the daemon rewrites",
            f"# {cfg.topology_file()} as instances come and go (first: slurm-conf --topology).",
            f"TopologyPlugin=topology/{cfg.topology.plugin}",
        ]
    if any(p.gpus_per_node for p in cfg.pools):
        lines.append(keep("GresTypes", ["gpu"]))
    lines = _name_replaced(lines, site)
    for p in cfg.pools:
        lines += _pool_lines(p, shapes, node_extra)
    return "\n".join(lines) + "\n"


def _pool_lines(p: Pool, shapes: dict[str, InstanceShape] | None,
                node_extra: Callable[[Pool], str] | None) -> list[str]:
    """A pool's NodeName and PartitionName lines."""
    out: list[str] = []
    cpus, mem, why = node_size(p, shapes)
    if why:
        out.append(why)
    attrs = [f"NodeName={p.node_range()}"]
    if cpus is not None:
        attrs.append(f"CPUs={cpus}")
    if mem is not None:
        attrs.append(f"RealMemory={mem}")
    if p.gpus_per_node:
        gt = f"{p.gpu_type}:" if p.gpu_type else ""
        attrs.append(f"Gres=gpu:{gt}{p.gpus_per_node}")
    feats = [p.capacity_type.value, *p.instance_types, *p.features]
    attrs.append(f"Feature={','.join(feats)}")
    attrs.append("State=CLOUD")
    if node_extra:
        extra = node_extra(p)
        if extra:
            attrs.append(extra)
    out.append(" ".join(attrs))
    # A job submitted to several partitions (-p block,spot,on-demand) is placed where it
    # can start first by tier: a Capacity Block (paid whether used or not), then spot,
    # then on-demand; while a spot pool is out of capacity its nodes are held, so it goes
    # to on-demand, and a block's nodes are reserved outside its window.
    tier = {CapacityType.CAPACITY_BLOCK: 3, CapacityType.SPOT: 2}.get(p.capacity_type, 1)
    # A block's nodes are paid for the whole block: Slurm's SuspendTime never powers them
    # down (partition-level, 22.05 on); slurmscale does at the window's close.
    block = p.capacity_type is CapacityType.CAPACITY_BLOCK
    stay_up = " SuspendTime=INFINITE" if block else ""
    if block:
        # Down (jobs queue, none starts) from each slurmctld start until the daemon has
        # the block's windows in Slurm's reservations: it sets the partition UP then.
        # Its State is slurmscale's; to take the pool out of service, drain its nodes.
        out.append("# The block partition starts DOWN: slurmscale opens it once its "
                   "windows are in Slurm.")
    out.append(f"PartitionName={p.partition} Nodes={p.node_range()} "
               f"State={'DOWN' if block else 'UP'} "
               f"MaxTime=INFINITE OverSubscribe=NO PriorityTier={tier}{stay_up}")
    return out


def _name_replaced(lines: list[str], site: Mapping[str, list[str]]) -> list[str]:
    """Each one-value parameter line that replaces the site's own value, with a comment
    above it naming the value replaced (an admin reading the file sees what changed)."""
    out: list[str] = []
    for line in lines:
        key, eq, value = line.partition("=")
        if eq and not line.startswith("#"):
            was = replaced(site, key, value)
            if was is not None and key not in LIST_KEYS:
                out.append(f"# (replaces the site's {key}={was})")
        out.append(line)
    return out


def render_gres_conf(cfg: Config, gpu_files: Callable[[Pool], str] | None = None) -> str:
    lines = [f"# Generated by `slurmscale slurm-conf --gres` for cluster {cfg.cluster_name}."]
    for p in cfg.pools:
        if not p.gpus_per_node:
            continue
        files = gpu_files(p) if gpu_files else f"/dev/nvidia[0-{p.gpus_per_node - 1}]"
        typ = f" Type={p.gpu_type}" if p.gpu_type else ""
        lines.append(f"NodeName={p.node_range()} Name=gpu{typ} Count={p.gpus_per_node} "
                     f"File={files}")
    return "\n".join(lines) + "\n"
