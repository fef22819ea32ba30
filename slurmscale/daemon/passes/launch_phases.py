"""Each launch's time to run, step by step, carried on from the signals each side already
gives (report/time_to_run.py says what the phases are).

A launch's row is recorded with its instances (launch.py: Slurm's resume call, the
CreateFleet answer; boots.py: a failed boot's fresh instance, from its answer). Each pass
then fills in, for the running launches whose node has not run a job yet:
- EC2's LaunchTime, and the bootstrap's step times from its `slurmscale:boot-times` tag
  (node_init.py), both from the sweep's DescribeInstances of this pass (`seen`);
- `registered`: the first pass that sees the node's slurmd registered (Slurm no longer has
  it powering up, powered down or not responding): within a pass of it;
- its first job's submission and start, as the ledger saw the job start this pass.
A row is written only when it changed; a launch whose node ran no job within FOLLOW_S is no
longer followed (its later phases stay unknown). A pass with no launch to follow reads one
indexed query and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime

from slurmscale.cloud.protocol import CloudInstance
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor.effects import Record
from slurmscale.daemon.metrics import Metrics
from slurmscale.model import SlurmNode
from slurmscale.report.time_to_run import TAG_BOOT_TIMES, done, kind, parse_boot_times
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import InstanceRow, LaunchPhasesRow

FOLLOW_S = 7_200.0  # a launch is followed this long for its node's first job
# Slurm's node flags while slurmd has not registered (or no longer answers)
NOT_REGISTERED = frozenset({"POWERING_UP", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN",
                            "NOT_RESPONDING"})


def _values(row: LaunchPhasesRow) -> tuple[object, ...]:
    """The row's own fields (a row the SQL store read carries its ORM state besides)."""
    return tuple(getattr(row, f.name) for f in fields(row))


def registered(node: SlurmNode) -> bool:
    return not (node.flags & NOT_REGISTERED) and node.base_state != "DOWN"


class LaunchPhasePass:
    def __init__(self, ctx: PassContext[LaunchStore], metrics: Metrics | None = None) -> None:
        self.ctx = ctx
        self.metrics = metrics

    def run(self, nodes: list[SlurmNode], active: list[InstanceRow],
            seen: list[CloudInstance] | None, started_on: Mapping[str, tuple[float, float]],
            now: datetime) -> None:
        """`active`: the store's running instances; `seen`: the cluster's instances as EC2
        listed them this pass (None: not read); `started_on`: node -> (submitted, started)
        of the jobs the ledger saw start this pass."""
        t = now.timestamp()
        rows = self.ctx.store.launch_phases(since_s=t - FOLLOW_S, open_only=True)
        if not rows:
            return
        running = {i.instance_id for i in active}
        rows = [r for r in rows if r.instance_id in running]
        want = {r.node for r in rows}
        node_of = {n.name: n for n in nodes if n.name in want}
        by_id = {i.instance_id: i for i in seen or () if i.instance_id in running}
        out = []
        for row in rows:
            before = _values(row)
            self._fill(row, by_id.get(row.instance_id), node_of.get(row.node),
                       started_on.get(row.node), t)
            if before != _values(row):
                out.append(row)
                if row.started_s is not None:
                    self._measured(row)
        if out:
            self.ctx.effects.apply([Record(tuple(out))])

    @staticmethod
    def _fill(row: LaunchPhasesRow, inst: CloudInstance | None, node: SlurmNode | None,
              job: tuple[float, float] | None, t: float) -> None:
        if inst is not None:
            if row.ec2_launch_s is None and inst.launched_at is not None:
                row.ec2_launch_s = inst.launched_at.timestamp()
            tag = inst.tags.get(TAG_BOOT_TIMES)
            if row.bootstrap_s is None and tag:
                steps = parse_boot_times(tag)
                # a kernel older than the launch is not this instance's own (a container)
                if steps.get("os_s", 0.0) < (row.ec2_launch_s or 0.0):
                    steps.pop("os_s", None)
                for field, v in steps.items():
                    setattr(row, field, v)
        if row.registered_s is None and node is not None and (registered(node) or job):
            row.registered_s = t
        if row.started_s is None and job is not None \
                and job[1] >= (row.answered_s or 0.0) - 60.0:
            row.submitted_s, row.started_s = job

    def _measured(self, row: LaunchPhasesRow) -> None:
        """A launch whose node has run its first job: its phases into the metrics."""
        if self.metrics is None:
            return
        for phase, s in done(row):
            self.metrics.launch_phase(row.pool, kind(row), phase.name, s)
