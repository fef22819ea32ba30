"""EC2's network topology kept in Slurm's topology.conf (`topology:`, docs/topology.md).

Each pass: the running instances EC2 has not placed yet are asked about (one batched
DescribeInstanceTopology, at most every `read_interval_s` for the same instance: EC2 answers
nothing until an instance runs, and its eventual consistency may lag a launch); a placement,
once read, is kept for the instance's life (an instance does not move). The file is
rendered from the placements (`slurmscale.topology.render`, tree or block) and written when it
changes; slurmctld re-reads it on `scontrol reconfigure` only, so that is sent at most every
`reconfigure_interval_s`: a burst of launches is one reconfigure, never one per node.

What slurmctld holds is what the file held at the last reconfigure: a daemon that restarts
finds the file as it left it and reconfigures only if the placements have changed since, or
if the file was written and slurmctld not told (a timer of kind TOPOLOGY_UNREAD on the store
from the write to the reconfigure: a leader that dies between the two leaves it to the next).
"""

from __future__ import annotations

import logging
from pathlib import Path

from slurmscale.audit import Kind
from slurmscale.cloud.protocol import CloudError
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.effects import Timers, WriteFile
from slurmscale.model import NetworkPlace
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import InstanceRow, TimerKind
from slurmscale.topology import render

log = logging.getLogger(__name__)

UNREAD = TimerKind.TOPOLOGY_UNREAD  # the file written, slurmctld not yet reconfigured
SUBJECT = "topology.conf"


class TopologyPass:
    def __init__(self, ctx: PassContext[LaunchStore]) -> None:
        assert ctx.cfg.topology is not None
        self.ctx = ctx
        self.settings = ctx.cfg.topology
        path = ctx.cfg.topology_file()
        assert path is not None
        self.path = Path(path)
        self.placed: dict[str, NetworkPlace] = {}  # instance id -> its place
        self.asked_at: dict[str, float] = {}  # instance id -> when EC2 was last asked
        try:
            self.written: str | None = self.path.read_text()
        except OSError:
            self.written = None
        self.reconfigured_at: float | None = None
        self.failing = False  # a failure said once until it works again

    def run(self, active: list[InstanceRow], now: float) -> None:
        running = {i.instance_id: i for i in active if i.state == "running"}
        for gone in set(self.placed) - set(running):
            del self.placed[gone]
        for gone in set(self.asked_at) - set(running):
            del self.asked_at[gone]
        self._read(running, now)
        cfg = self.ctx.cfg
        nodes = [n for p in cfg.pools for n in p.node_names()]
        text = render(self.settings.plugin, nodes,
                      {running[i].node: place for i, place in self.placed.items()})
        if text != self.written:
            # in place: SlurmUser owns the file, not the directory slurm.conf is in
            (wrote,) = self.ctx.effects.apply([WriteFile(str(self.path), text)])
            if not wrote.taken:
                self._failed(wrote.error)
                return
            self.written = text
            self.ctx.effects.apply([Timers(UNREAD, {SUBJECT: now})])
        due = SUBJECT in self.ctx.store.timers(UNREAD)  # (since slurmctld last read it)
        if due and (self.reconfigured_at is None or now - self.reconfigured_at
                    >= self.settings.reconfigure_interval_s):
            placed = sorted(running[i].node for i in self.placed)
            word = "block" if self.settings.plugin == "block" else "switch"
            parts = sum(1 for line in text.splitlines() if line.startswith(
                f"{word.capitalize()}Name="))
            (told,) = self.ctx.effects.apply([edits.reconfigure(said=(
                Kind.TOPOLOGY_UPDATED, f"{self.path}: {len(placed)} node(s) placed by "
                f"EC2's network topology, {parts} {word}(s); slurmctld reconfigured"))])
            if not told.taken:
                self._failed(f"scontrol reconfigure: {told.error}")
                return
            self.ctx.effects.apply([Timers(UNREAD, over=(SUBJECT,))])
            self.reconfigured_at, self.failing = now, False

    def _read(self, running: dict[str, InstanceRow], now: float) -> None:
        every = self.settings.read_interval_s
        ask = sorted(i for i in running if i not in self.placed
                     and now - self.asked_at.get(i, -every) >= every)
        if not ask:
            return
        for i in ask:
            self.asked_at[i] = now
        try:
            found = self.ctx.cloud.instance_topology(ask)
        except CloudError as e:
            log.warning("cannot read the instances' network topology: %s", e)
            return
        self.placed.update({i: layers for i, layers in found.items() if i in running})

    def _failed(self, why: str) -> None:
        if not self.failing:
            self.ctx.event(Kind.TOPOLOGY_FAILED, f"{why}; Slurm keeps the topology it has, "
                           "tried again next pass")
        self.failing = True
