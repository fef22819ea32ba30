"""Warm pools of stopped instances (a pool's `warm_pool`, config_pool.WarmPool): a released
node's on-demand instance stopped instead of terminated while its pool holds fewer than the
pool's size; a resume's gang started whole from stopped instances of one subnet before any
CreateFleet, or not at all; and each pass, the stopped instances kept honest: those gone from
EC2 forgotten, those past their age, the pool's size or its launch template version
terminated, a stopped instance of this cluster that the store does not know terminated as a
leak.

What EC2 does, from its documentation: a stopped instance keeps its EBS volumes, private IP,
tags and placement group and is billed for its volumes only; StartInstances may refuse it
(InsufficientInstanceCapacity: "If you get an InsufficientInstanceCapacity error when you
try to launch an instance or restart a stopped instance, AWS does not currently have enough
available On-Demand capacity": EC2 user guide, "Troubleshoot Amazon EC2 instance launch
issues"); a started instance's LaunchTime is its start's (EC2 API reference, Instance:
"The time that the instance was last launched"). The bootstrap runs at every boot
(node_init.py's unit), so a started instance joins as the node its tag names: the tag is set
before the start.

Crash safety: the gang's row is `launching` and each instance carries the gang's tag before
its start, so a daemon killed between the starts and their outcome finds the gang's
instances among its warm rows (`resume`): all there, the starts not made are made; else they
are given back and the gang launches cold. A started instance its store still has stopped,
outside a launch in flight, is running untracked, which the sweep terminates as a leak."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from slurmscale.audit import Kind
from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_GANG, TAG_NODE, CloudInstance
from slurmscale.config import Pool
from slurmscale.crashpoints import crash_point
from slurmscale.daemon.context import PassContext, launched
from slurmscale.daemon.executor.effects import Effect, Say, Start, Stop, Tag, Together, Untrack
from slurmscale.hostlists import compress
from slurmscale.model import Gang, LaunchedInstance
from slurmscale.report.time_to_run import TAG_BOOT_TIMES
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import InstanceRow, utc


def keepable(pool: Pool, row: InstanceRow) -> bool:
    """An instance a release may stop into its pool's warm pool: the pool has one, and the
    instance is on-demand, outside any reservation, of the pool's launch template version."""
    return (pool.warm_pool is not None and row.lifecycle == "on-demand"
            and not row.capacity_reservation_id
            and row.launch_template_version == pool.launch_template.version)


def pick(warm: list[InstanceRow], size: int) -> list[InstanceRow] | None:
    """`size` stopped instances of one subnet (one AZ: a gang's all-or-nothing), the most
    recently started first (least aged); None when no subnet has that many."""
    by_subnet: dict[str, list[InstanceRow]] = defaultdict(list)
    for r in warm:
        by_subnet[r.subnet_id or ""].append(r)
    fits = [rows for rows in by_subnet.values() if len(rows) >= size]
    if not fits:
        return None
    best = max(fits, key=lambda rows: (len(rows), max(utc(r.launched_at) for r in rows)))
    return sorted(best, key=lambda r: utc(r.launched_at), reverse=True)[:size]


def retired(pool: Pool, warm: list[InstanceRow], now: datetime) -> dict[str, str]:
    """Which stopped instances go, and why: another launch template version than the
    pool's, older than its `max_age_s` since their last start, or beyond its size (the
    oldest first)."""
    wp = pool.warm_pool
    out: dict[str, str] = {}
    keep: list[InstanceRow] = []
    for r in warm:
        if wp is None:
            out[r.instance_id] = f"pool {pool.name} has no warm pool"
        elif r.launch_template_version != pool.launch_template.version:
            out[r.instance_id] = (f"launch template v{r.launch_template_version}, the pool's "
                                  f"is v{pool.launch_template.version}")
        elif (now - utc(r.launched_at)).total_seconds() > wp.max_age_s:
            out[r.instance_id] = f"stopped longer than max_age_s ({wp.max_age_s:g}s)"
        else:
            keep.append(r)
    size = wp.size if wp is not None else 0
    for r in sorted(keep, key=lambda r: utc(r.launched_at))[:max(0, len(keep) - size)]:
        out[r.instance_id] = f"beyond warm_pool.size ({size})"
    return out


class WarmInstances:
    """The pools' warm instances: stopped on release, started for a gang, tended each
    pass. Every write is an effect (effects.py)."""

    def __init__(self, ctx: PassContext[LaunchStore]) -> None:
        self.ctx = ctx
        self.enabled = any(p.warm_pool is not None for p in ctx.cfg.pools)
        self.none_left = False  # (no warm row found, and no warm pool to make one)
        # each warm pool's stopped instances after the last pass's tending (metrics)
        self.counts: dict[str, int] = {p.name: 0 for p in ctx.cfg.pools
                                       if p.warm_pool is not None}

    # --- release ---------------------------------------------------------------------
    def keep(self, rows: Iterable[InstanceRow]) -> list[InstanceRow]:
        """Of the released instances, those its pool's warm pool has room for (by node)."""
        if not self.enabled:
            return []
        room: dict[str, int] = {}
        out = []
        for r in sorted(rows, key=lambda r: r.node):
            pool = self.ctx.cfg.pool_of(r.node)
            if pool is None or pool.warm_pool is None or not keepable(pool, r):
                continue
            if pool.name not in room:
                room[pool.name] = pool.warm_pool.size - len(
                    self.ctx.store.warm_instances(pool.name))
            if room[pool.name] > 0:
                room[pool.name] -= 1
                out.append(r)
        return out

    def stop(self, rows: list[InstanceRow], why: str) -> list[str]:
        """Their node tags cleared (no release or sweep then takes a stopped instance for a
        node's), then stopped; returns the ids stopped (the caller terminates the rest)."""
        if not rows:
            return []
        done = self.ctx.effects.apply([Together(tuple(
            Tag(r.instance_id, r.node, {TAG_NODE: ""}) for r in rows))])
        cleared = tuple(a.effect.instance_id for a in done
                        if a.taken and isinstance(a.effect, Tag))
        if not cleared:
            return []
        (stopped,) = self.ctx.effects.apply([Stop(cleared, why)])
        return list(cleared) if stopped.taken else []

    # --- resume ----------------------------------------------------------------------
    def start(self, pool: Pool, gang: Gang, gid: str) -> tuple[LaunchedInstance, ...] | None:
        """The whole gang from stopped instances of one subnet, or None (too few, or a
        start refused: those started are stopped again, every one given back its place,
        and the caller launches the gang cold). Each instance is tagged with its node and
        the gang before its start (what its bootstrap reads, and what a restart finds)."""
        if pool.warm_pool is None:
            return None
        picked = pick(self.ctx.store.warm_instances(pool.name), gang.size)
        if picked is None:
            return None
        # (paired as the launch pairs what it is given, node by instance id: each instance
        # boots as the node it is tagged with now)
        rows = sorted(picked, key=lambda r: r.instance_id)
        pairs = list(zip(gang.nodes, rows, strict=True))
        # (its step times cleared too: what the bootstrap tags after this start is this
        # launch's, never read for it from the boot before)
        tagged = self.ctx.effects.apply([Together(tuple(
            Tag(r.instance_id, node, {TAG_NODE: node, TAG_GANG: gid, TAG_BOOT_TIMES: ""}, gid)
            for node, r in pairs))])
        if not all(a.taken for a in tagged):
            self._give_back(rows, [])
            return None
        crash_point("warm:before_start")
        return self._start_all(gang, gid, pairs, [])

    def _start_all(self, gang: Gang, gid: str, pairs: list[tuple[str, InstanceRow]],
                   running: list[str]) -> tuple[LaunchedInstance, ...] | None:
        """Each instance of `pairs` started but those `running` already, in order, until
        one is refused: then every one given back (`_give_back`)."""
        rows = [r for _, r in pairs]
        started = list(running)
        refused = ""
        for node, r in pairs:
            if r.instance_id in running:
                continue
            (out,) = self.ctx.effects.apply([Start(r.instance_id)])
            if not out.taken:
                refused = f"{r.instance_id} ({node}): {out.code or out.error}"
                break
            started.append(r.instance_id)
            crash_point("warm:between_starts")
        nodes = compress(list(gang.nodes))
        if refused:
            self.ctx.effects.apply([Say(
                Kind.WARM_START_REFUSED, f"{nodes}: {refused}; "
                f"{len(started)} started put back, the gang launches cold", node=nodes,
                gang=gid)])
            self._give_back(rows, started)
            return None
        self.ctx.effects.apply([Say(Kind.WARM_STARTED, f"{nodes}: " + ", ".join(
            f"{node}={r.instance_id}" for node, r in pairs) + " started from the warm pool",
            node=nodes, gang=gid)])
        return tuple(launched(r) for r in rows)

    def resume(self, pool: Pool, gang: Gang, gid: str) -> tuple[LaunchedInstance, ...] | None:
        """A warm start a daemon was killed in (the gang's row `launching`): the pool's
        stopped instances carrying the gang's tag, started or not, are its instances. All of
        them there, each tagged with its node: the starts not made are made now; anything
        else of them is given back. None: no warm start of this gang (a CreateFleet's
        launch, found by `GangLauncher._recover`), or given back."""
        if pool.warm_pool is None:
            return None
        warm = {r.instance_id: r for r in self.ctx.store.warm_instances(pool.name)}
        found = [i for i in self.ctx.cloud.find({TAG_CLUSTER: self.ctx.cfg.cluster_name,
                                                  TAG_GANG: gid})
                 if i.instance_id in warm]
        if not found:
            return None
        by_node = {i.tags.get(TAG_NODE, ""): i for i in found}
        rows = [warm[i.instance_id] for i in found]
        if sorted(by_node) != sorted(gang.nodes) or len(found) != gang.size:
            self._give_back(rows, [i.instance_id for i in found
                                   if i.state in ("pending", "running")])
            return None
        pairs = [(n, warm[by_node[n].instance_id]) for n in gang.nodes]
        self.ctx.effects.apply([Say(
            Kind.LAUNCH_RECOVERED, f"gang {gid}: a warm start cut off; its instances "
            + ", ".join(f"{n}={r.instance_id}" for n, r in pairs) + " taken", gang=gid)])
        return self._start_all(gang, gid, pairs, [i.instance_id for i in found
                                                  if i.state in ("pending", "running")])

    def _give_back(self, rows: list[InstanceRow], started: list[str]) -> None:
        """A warm start that did not take the gang: the started instances stopped again,
        every instance's tags as they were (no node; its own gang's)."""
        out: list[Effect] = [Together(tuple(
            Tag(r.instance_id, "", {TAG_NODE: "", TAG_GANG: r.gang_id}) for r in rows))]
        if started:
            out.append(Stop(tuple(started), "a warm start that did not take its whole gang"))
        done = self.ctx.effects.apply(out)
        if started and not done[-1].taken:  # (running, tracked warm: never left so)
            self.ctx.terminate(started, "stopped again refused after a warm start")

    # --- each pass -------------------------------------------------------------------
    def tend(self, seen: list[CloudInstance] | None, tracked: set[str], now: datetime) -> None:
        """`seen`: this pass's listing of the cluster's instances (None: EC2 silent, nothing
        is judged); `tracked`: the ids the store has running. Forgets warm instances EC2 no
        longer has, terminates retired ones, and (with a warm pool configured) stopped ones
        no row tracks. Without one, the store is read once for instances left warm by an
        earlier configuration, never again once none is left."""
        if seen is None or (not self.enabled and self.none_left):
            return
        warm = self.ctx.store.warm_instances()
        self.none_left = not warm
        listed = {i.instance_id: i for i in seen}
        gone = tuple(r.instance_id for r in warm
                     if r.instance_id not in listed or listed[r.instance_id].state in
                     ("terminated", "shutting-down"))
        if gone:
            self.ctx.effects.apply([Untrack(gone), Say(
                Kind.WARM_RETIRED, f"{','.join(gone)}: gone from EC2 while stopped")])
        live = [r for r in warm if r.instance_id not in gone]
        why: dict[str, str] = {}
        pools = {p.name: p for p in self.ctx.cfg.pools}
        for name in sorted({r.pool for r in live}):
            rows = [r for r in live if r.pool == name]
            if name in pools:
                why.update(retired(pools[name], rows, now))
            else:
                why.update({r.instance_id: f"pool {name} is no longer configured"
                            for r in rows})
        if self.enabled:
            why.update({i.instance_id: "stopped, tagged for this cluster, tracked by no "
                        "store row (a leak)" for i in self._strays(seen, warm, tracked, now)})
        gone_now = {iid for iid, reason in sorted(why.items())
                    if self.ctx.terminate([iid], f"warm pool: {reason}")}
        self.ctx.effects.apply([Say(Kind.WARM_RETIRED, f"{iid}: {why[iid]}")
                                for iid in sorted(gone_now)])
        for name in self.counts:
            self.counts[name] = sum(1 for r in live
                                    if r.pool == name and r.instance_id not in gone_now)

    def _strays(self, seen: list[CloudInstance], warm: list[InstanceRow], tracked: set[str],
                now: datetime) -> list[CloudInstance]:
        """Stopped instances of this cluster no row knows, older than the leak grace (a
        store lost, a crash between a stop and its row: a stopped instance costs its
        volumes for ever)."""
        known = {r.instance_id for r in warm} | tracked
        grace = self.ctx.cfg.daemon.leak_grace_s
        return [i for i in seen if i.state in ("stopping", "stopped")
                and i.tags.get(TAG_CLUSTER) == self.ctx.cfg.cluster_name
                and i.instance_id not in known and i.launched_at is not None
                and (now - utc(i.launched_at)).total_seconds() >= grace]
