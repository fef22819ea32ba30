"""The simulated Slurm behind the daemon's `SlurmClient` protocol.

The simulator runs the daemon's own reconcile loop (`daemon/reconcile.py`, every pass)
against this adapter: they read nodes, jobs and reservations in the shapes
`scontrol`/`squeue` give them, and their updates (power up/down, drain, reservations, a job
pointed at a reservation, a requeue) change the engine's model the way slurmctld changes its
own. Node addresses and SuspendExcNodes are kept and read back as set, changing no
scheduling; ended jobs are not listed (Slurm forgets them after MinJobAge).

Times: the engine counts trace seconds from 0; Slurm and the daemon see Unix seconds, the
trace's 0 being `EPOCH` (printed in UTC with an offset, so no local-time ambiguity).
"""

from __future__ import annotations

import itertools
import math
from operator import ne

from slurmscale.hostlists import compress
from slurmscale.model import (
    JobPriority,
    PriorityWeights,
    QueueJob,
    QueueRead,
    SlurmNode,
    SlurmReservation,
    next_read,
)
from slurmscale.sim.model_view import EPOCH, SimModel, SimNode, SimReservation, squeue_limit, stamp
from slurmscale.sim.slurm_model import SchedulerKind
from slurmscale.slurm.protocol import SlurmError


class SimSlurm:
    """Implements `SlurmClient` over the simulated slurmctld (its `now` is the engine's)."""

    def __init__(self, sim: SimModel) -> None:
        self.sim = sim
        self.now = 0.0
        self.res: dict[str, SimReservation] = {}
        # each pending job's record as last read, and what it showed
        self._pending: dict[int, QueueJob] = {}
        self._keys: dict[int, tuple[int, bool, str, bool, float | None]] = {}
        # what those keys were made of at the last read (the pending jobs, those waiting for
        # their BeginTime, priorities, reservations, steered jobs, expected starts)
        self._seen: tuple[object, ...] = ()
        # each running job's start and lines (running, and CONFIGURING while its nodes boot)
        self._running: dict[int, tuple[float, QueueJob, QueueJob]] = {}
        self._shown_running: dict[int, QueueJob] = {}  # each running job's line as last read
        # the running lines as last read, the placements they were read from, and when the
        # first job shown CONFIGURING starts (its line changes then)
        self._running_out: list[QueueJob] = []
        self._running_serial = -1
        self._configured_at = math.inf
        self._read: int | None = None  # the last active_jobs read's serial (QueueRead)
        self.addr: dict[str, tuple[str, str]] = {}  # NodeAddr, NodeHostname where set
        self.suspend_exc = ""  # SuspendExcNodes as last set (23.02+: settable at run time)
        # every node as last read; only those the engine touched since are read again
        self._reserved: frozenset[str] = frozenset()  # in a reservation active at the read
        self._nodes: list[SlurmNode] = [self._node(n) for n in sim.nodes]
        self._partitions = sorted({p for n in self._nodes for p in n.partitions})

    def begin_pass(self, now: float) -> None:
        """A daemon pass starts at `now`."""
        self.now = now

    def _changed(self, names: list[str] | tuple[str, ...] = ()) -> None:
        """An update changed what Slurm may schedule (these nodes): the backfill plan is
        stale, and the update asks for a main scheduler run, as Slurm's update RPCs do."""
        self.sim.touched.update(names)
        self.sim.bf_dirty = True
        self.sim.main_wanted = True

    # --- reads ---------------------------------------------------------------------------
    def nodes(self, names: list[str] | None = None) -> list[SlurmNode]:
        self._expire()
        touched, index, nodes = self.sim.touched, self.sim.node_index, self.sim.nodes
        reserved = self._reserved_now()
        if reserved != self._reserved:  # a window began or ended: those nodes shown anew
            touched.update(reserved ^ self._reserved)
            self._reserved = reserved
        for name in touched:
            i = index[name]
            self._nodes[i] = self._node(nodes[i])
        touched.clear()
        if names is not None:
            want = set(names)
            return [n for n in self._nodes if n.name in want]
        return list(self._nodes)

    def _reserved_now(self) -> frozenset[str]:
        """The nodes in a reservation active now (a few reservations: read at every node
        read, as a window begins by the clock, not by an update)."""
        now = self.now
        return frozenset(n for r in self.res.values() if r.start <= now < r.end
                         for n in r.nodes)

    def _node(self, n: SimNode) -> SlurmNode:
        # RESERVED: in a reservation active now, whatever its power state (real slurmctld
        # 22.05 shows IDLE+CLOUD+POWERED_DOWN+RESERVED within seconds of a window's start:
        # the Slurm contract's window step)
        reserved = n.resv is not None or n.name in self._reserved
        if n.state == "down":
            flags = ["IDLE", "CLOUD", "POWERED_DOWN"]
            if reserved:
                flags.append("RESERVED")
        else:
            flags = ["MIXED" if n.free else "ALLOCATED"] if n.jobs else ["IDLE"]
            if n.failed_at is not None:
                flags = ["DOWN"]
            flags.append("CLOUD")
            if reserved:
                flags.append("RESERVED")
            if n.state == "booting":
                flags.append("POWERING_UP")
        if n.drain:
            flags.insert(2, "DRAIN")
        if n.failed_at is not None and n.state != "down":
            flags.append("NOT_RESPONDING")
        addr, host = self.addr.get(n.name, (n.name, n.name))
        return SlurmNode(n.name, "+".join(flags), addr, host, n.drain, (n.pool,),
                         stamp(n.idle_since) if n.idle_since is not None else "",
                         n.gpus - n.free if n.jobs else 0)

    def active_jobs(self) -> list[QueueJob]:
        """squeue's pending and running lines, as the daemon reads them: a QueueRead that
        says which records are new since the last such read and which it let go, as the
        squeue parse's does (so the daemon's queue view takes the path it takes on a real
        cluster: the change, not a walk of the queue)."""
        changed: list[QueueJob] = []
        dropped: list[QueueJob] = []
        records = self._pending_lines(changed, dropped) + self._started(changed, dropped)
        read = QueueRead(records, next_read(), self._read, changed, dropped)
        self._read = read.serial
        return read

    def pending_jobs(self) -> list[QueueJob]:
        self._read = None  # (the next active_jobs' change would be relative to this read)
        return self._pending_lines([], [])

    def _pending_lines(self, changed: list[QueueJob], dropped: list[QueueJob]
                       ) -> list[QueueJob]:
        """squeue's pending lines: a job's record is made again only when what it shows
        changed (its priority, whether it waits for its BeginTime, its reservation, its
        partitions, backfill's expected start), else the same record as last read (so the
        daemon's queue view, which compares records by identity, works out only those).
        The keys are made and compared in C (map, zip): every pending job every pass.
        Records made afresh are added to `changed`, those they replace or whose job left
        the queue to `dropped`."""
        sim, now = self.sim, self.now
        pend = list(sim.pending)
        waiting = {i for i, t in sim.eligible_at.items() if t > now}
        # (most reads, at rest: what the keys are made of is what it was at the last read,
        # so is every key; compared whole, in C, instead of job by job)
        seen = (pend, waiting, sim.shown, sim.attached, sim.steered, sim.expected)
        if seen == self._seen:
            return list(map(self._pending.__getitem__, pend))
        self._seen = (pend, waiting, dict(sim.shown), dict(sim.attached), set(sim.steered),
                      dict(sim.expected))
        keys = list(zip(map(sim.shown.__getitem__, pend), map(waiting.__contains__, pend),
                        map(sim.attached.get, pend, itertools.repeat("")),
                        map(sim.steered.__contains__, pend), map(sim.expected.get, pend),
                        strict=True))
        known, records = self._keys, self._pending
        is_new = map(ne, keys, map(known.get, pend))
        for idx, key in itertools.compress(zip(pend, keys, strict=True), is_new):
            prio, wait, resv, _, expected = key
            job = sim.jobs[idx]
            known[idx] = key
            old = records.get(idx)
            if old is not None:
                dropped.append(old)
            # a requeued job waits out Slurm's requeue delay as BeginTime
            records[idx] = rec = QueueJob(
                sim.slurm_ids[idx], sim.partitions(idx), job.nodes,
                job.gpus_per_node(sim.main.gpus_per_node), squeue_limit(sim.limit[idx]),
                stamp(job.submit_s), "BeginTime" if wait else "Resources", prio,
                job.user or "user", "PENDING", reservation=resv,
                expected_start="N/A" if expected is None else stamp(expected))
            changed.append(rec)
        if len(known) != len(pend):  # jobs left the queue
            for idx in known.keys() - sim.pending.keys():
                dropped.append(records.pop(idx))
                del known[idx]
        return list(map(records.__getitem__, pend))

    def _started(self, changed: list[QueueJob], dropped: list[QueueJob]) -> list[QueueJob]:
        """squeue's running lines (CONFIGURING while their nodes boot), a job's record made
        again only when its line changes (it started again, its nodes came up), as the
        squeue parse gives back the very record for a line printed again; new records
        added to `changed`, those they replace or whose job ended to `dropped`. The list is
        kept for the next read: not to be edited (`active_jobs` joins it to a new one)."""
        sim, shown = self.sim, self._shown_running
        if sim.placed_serial == self._running_serial and self.now < self._configured_at:
            return self._running_out  # no job placed or over, none came up: the same
        out = []
        configured_at = math.inf
        for idx, placed in sim.placed.items():
            start = sim.start[idx]
            hit = self._running.get(idx)
            if hit is None or hit[0] != start:
                job = sim.jobs[idx]
                rec = QueueJob(
                    sim.slurm_ids[idx], (placed[0][0].pool,), job.nodes,
                    job.gpus_per_node(sim.main.gpus_per_node), squeue_limit(sim.limit[idx]),
                    stamp(job.submit_s), "None", 0, job.user or "user", "RUNNING",
                    reservation=sim.started_in.get(job.job_id, ""),
                    end_time=stamp(start + sim.limit[idx]),
                    nodelist=compress([n.name for n, _ in placed]), start_time=stamp(start))
                # (and its line while its nodes boot: the same record each read meanwhile)
                hit = self._running[idx] = (start, rec, rec._replace(state="CONFIGURING"))
            if start > self.now:
                job_q = hit[2]
                configured_at = min(configured_at, start)
            else:
                job_q = hit[1]
            was = shown.get(idx)
            if was is not job_q:
                if was is not None:
                    dropped.append(was)
                changed.append(job_q)
                shown[idx] = job_q
            out.append(job_q)
        if len(self._running) != len(sim.placed):  # jobs ended (or were requeued)
            for idx in [i for i in self._running if i not in sim.placed]:
                del self._running[idx]
                dropped.append(shown.pop(idx))
        self._running_out, self._running_serial = out, sim.placed_serial
        self._configured_at = configured_at
        return out

    def ended_jobs(self) -> list[QueueJob]:
        return []

    def priorities(self) -> list[JobPriority]:
        """`sprio` for the pending jobs: one line per job and partition, the Slurm model's
        weighted factors (the greedy model has none: its order is the submit order). As
        Slurm's, it leaves out a job waiting for its BeginTime (a requeued one, here)."""
        sim = self.sim
        out = []
        for idx in sim.pending:
            if sim.eligible_at.get(idx, 0.0) > self.now:
                continue
            age, size, fairshare = sim.priority_factors(idx)
            prio = float(sim.shown[idx])
            job_id = sim.slurm_ids[idx]
            out += [JobPriority(job_id, p, prio, age, fairshare, size, 0.0, 0.0)
                    for p in sim.partitions(idx)]
        return out

    def priority_weights(self) -> PriorityWeights | None:
        m = self.sim.sched
        if m.kind is not SchedulerKind.SLURM:
            return None  # the greedy model orders by submission, as priority/basic
        return PriorityWeights(m.priority_weight_age, m.priority_max_age)

    def jobs_on_node(self, node: str) -> list[str]:
        return [self.sim.slurm_ids[i] for i, placed in self.sim.placed.items()
                if any(n.name == node for n, _ in placed)]

    def suspend_exc_nodes(self) -> str | None:
        """Kept as set, as Slurm 23.02+ does (the simulated Slurm powers nothing down on its
        own, so the list changes nothing here)."""
        return self.suspend_exc

    def set_suspend_exc_nodes(self, value: str) -> None:
        self.suspend_exc = value

    def job(self, job_id: int | str) -> dict[str, str]:
        idx = self.sim.idx_of.get(str(job_id))
        if idx is None:
            raise SlurmError(["scontrol", "show", "job", str(job_id)], 1,
                             "Invalid job id specified")
        state = ("PENDING" if idx in self.sim.pending else "RUNNING" if idx in self.sim.placed
                 else "COMPLETED")
        return {"JobId": str(job_id), "JobState": state}

    def reservations(self) -> list[SlurmReservation]:
        self._expire()
        return [SlurmReservation(r.name, r.nodes, r.users, start_time=stamp(r.start),
                                 end_time=stamp(r.end),
                                 state="ACTIVE" if r.start <= self.now else "INACTIVE")
                for r in self.res.values()]

    # --- nodes ---------------------------------------------------------------------------
    def power_down(self, names: list[str]) -> None:
        self.sim.release_nodes(names, self.now)
        self._changed()

    def power_down_force(self, names: list[str], reason: str) -> None:
        """Down now, busy or booting (Slurm requeues what still runs there)."""
        self.sim.release_nodes(names, self.now, force=True)
        self._changed()

    def power_up(self, names: list[str]) -> None:
        self.sim.warm_nodes(names, self.now)
        self._changed()

    def drain(self, names: list[str], reason: str) -> None:
        for name in names:
            self.sim.by_name[name].drain = reason
        self._changed(names)

    def undrain(self, names: list[str]) -> None:
        for name in names:
            self.sim.by_name[name].drain = ""
        self._changed(names)

    def set_node_address(self, name: str, addr: str, hostname: str) -> None:
        self.set_node_addresses([(name, addr, hostname)])

    def set_node_addresses(self, entries: list[tuple[str, str, str]]) -> None:
        """Kept and reported back (what the daemon compares); no scheduling changes."""
        for name, addr, host in entries:
            if name not in self.sim.by_name:
                raise SlurmError(["scontrol", "update", f"nodename={name}"], 1,
                                 f"Invalid node name specified: {name}")
            self.addr[name] = (addr, host)
            self.sim.touched.add(name)

    def set_node_instances(self, entries: list[tuple[str, str, str]]) -> bool:
        return False  # (the simulated Slurm keeps no instance fields)

    # --- jobs ----------------------------------------------------------------------------
    def set_job_partitions(self, job_id: str, partitions: list[str]) -> None:
        """Only a pending job moves. Jobs are submitted to every partition they may use
        (spot, then its on-demand fallback), so the one move there is: on-demand only."""
        idx = self.sim.idx_of[job_id]
        cmd = ["scontrol", "update", f"jobid={job_id}", f"partition={','.join(partitions)}"]
        if idx not in self.sim.pending:
            raise SlurmError(cmd, 1, "Job is no longer pending execution")
        now = self.sim.partitions(idx)
        if tuple(partitions) == now:
            return
        if len(now) < 2 or partitions != [now[-1]]:
            raise SlurmError(cmd, 1, "the simulator moves a job only to its on-demand "
                             "fallback partition")
        self.sim.steer(idx)
        self._changed()

    def set_job_reservation(self, job_id: str, name: str) -> None:
        idx = self.sim.idx_of[job_id]
        cmd = ["scontrol", "update", f"JobId={job_id}", f"Reservation={name}"]
        if idx not in self.sim.pending:
            raise SlurmError(cmd, 1, "Job is no longer pending execution")
        if not name:  # "": out of its reservation
            self.sim.attached.pop(idx, None)
        elif name not in self.res:
            raise SlurmError(cmd, 1, "Requested reservation is invalid")
        else:
            self.sim.attached[idx] = name
        self._changed()

    def requeue(self, job_id: str, node: str = "") -> None:
        """The whole job back to the queue (every node of a gang), eligible again after
        Slurm's requeue delay (the simulated Slurm is one without expedited requeues)."""
        idx = self.sim.idx_of.get(str(job_id))
        cmd = ["scontrol", "requeue", str(job_id)]
        if idx is None:
            raise SlurmError(cmd, 1, "Invalid job id specified")
        if idx not in self.sim.placed:
            raise SlurmError(cmd, 1, "Job is pending execution" if idx in self.sim.pending
                             else "Job/step already completing or completed")
        self.sim.requeue_job(idx, self.now)
        self._changed()

    def reconfigure(self) -> None:
        pass  # (the simulated Slurm has no config files to re-read)

    def signal_job(self, job_id: str, signal: str, full: bool) -> None:
        """A running job signalled: a trace job that saves on a signal saves now (its
        requeue then keeps that much of the run); refused as scancel refuses."""
        idx = self.sim.idx_of.get(str(job_id))
        if idx is None or idx not in self.sim.placed:
            raise SlurmError(["scancel", f"--signal={signal}", str(job_id)], 1,
                             "Job/step already completing or completed")
        self.sim.signal(idx, self.now)

    # --- reservations --------------------------------------------------------------------
    def create_reservation(self, name: str, nodes: list[str], users: list[str],
                           duration_s: float) -> None:
        if name in self.res:
            raise SlurmError(["scontrol", "create", "reservation", name], 1,
                             "Duplicate reservation name")
        # Duration in whole minutes, as the CLI backend gives it
        end = self.now + max(1, round(duration_s / 60)) * 60.0
        self._refuse_overlap(["scontrol", "create", "reservation", name],
                             SimReservation(name, tuple(nodes), tuple(users), self.now, end))
        self.res[name] = SimReservation(name, (), tuple(users), self.now, end)
        self.set_reservation_nodes(name, nodes)

    def create_window_reservation(self, name: str, nodes: list[str], users: list[str],
                                  start_s: float | None, end_s: float) -> None:
        """A reservation over a time window (the daemon's Unix seconds; start None: now),
        Flags=IGNORE_JOBS as the CLI backend makes it: made whatever runs on its nodes.
        Slurm refuses one that overlaps another reservation on any of the same nodes."""
        cmd = ["scontrol", "create", "reservation", name]
        if name in self.res:
            raise SlurmError(cmd, 1, "Duplicate reservation name")
        start = self.now if start_s is None else int(start_s - EPOCH)
        self._place_window(cmd, SimReservation(name, (), tuple(users), start,
                                               int(end_s - EPOCH), window=True), nodes)

    def update_window_reservation(self, name: str, nodes: list[str], start_s: float | None,
                                  end_s: float) -> None:
        """Moved in place (start None: kept), under the same overlap rule."""
        cmd = ["scontrol", "update", f"ReservationName={name}"]
        r = self.res.get(name)
        if r is None or not r.window:
            raise SlurmError(cmd, 1, "Invalid reservation name")
        start = r.start if start_s is None else int(start_s - EPOCH)
        self._place_window(cmd, SimReservation(name, (), r.users, start, int(end_s - EPOCH),
                                               window=True), nodes)

    def _place_window(self, cmd: list[str], r: SimReservation, nodes: list[str]) -> None:
        """Window reservation `r` over `nodes` in place of any of its name, or refused."""
        if r.end <= r.start or not nodes:
            raise SlurmError(cmd, 1, "Invalid reservation request")
        r.nodes = tuple(sorted(nodes, key=self.sim.node_index.__getitem__))
        self._refuse_overlap(cmd, r)
        old = self.res.get(r.name)
        self.res[r.name] = r
        self._windows({*(old.nodes if old else ()), *r.nodes})

    def _refuse_overlap(self, cmd: list[str], r: SimReservation) -> None:
        """Slurm's rule: no two reservations on one node for overlapping times (a hold is
        checked against the window reservations only: the model holds a node in one hold
        at a time, `Node.resv`)."""
        want = set(r.nodes)
        for o in self.res.values():
            if (o.name != r.name and (r.window or o.window) and want.intersection(o.nodes)
                    and o.start < r.end and r.start < o.end):
                raise SlurmError(cmd, 1, "Reservation request overlaps another reservation")

    def _windows(self, names: set[str]) -> None:
        """The nodes' window spans as the window reservations now say (the model checks a
        job's time limit against them)."""
        spans: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for r in self.res.values():
            if r.window:
                for n in names.intersection(r.nodes):
                    spans[n].append((r.start, r.end))
        for n, got in spans.items():
            self.sim.by_name[n].windows = tuple(sorted(got))
        self.sim.windowed = any(r.window for r in self.res.values())
        self._changed(sorted(names))

    def set_reservation_nodes(self, name: str, nodes: list[str]) -> None:
        r = self.res[name]
        if r.window:
            self.update_window_reservation(name, nodes, None, r.end + EPOCH)
            return
        self._changed(r.nodes)
        for n in r.nodes:
            self.sim.by_name[n].resv = None
        r.nodes = tuple(sorted(nodes, key=self.sim.node_index.__getitem__))
        for n in r.nodes:
            self.sim.by_name[n].resv = name
        self._changed(r.nodes)

    def partition_states(self) -> dict[str, str]:
        return {p: "DOWN" if p in self.sim.down else "UP" for p in self._partitions}

    def set_partition_state(self, name: str, state: str) -> None:
        """UP or DOWN (a DOWN partition starts no job; one submitted to several partitions
        runs in another)."""
        if name not in self._partitions or state not in ("UP", "DOWN"):
            raise SlurmError(["scontrol", "update", f"PartitionName={name}", f"State={state}"],
                             1, "Invalid partition name specified" if state in ("UP", "DOWN")
                             else "Invalid input: State")
        if state == "DOWN":
            self.sim.down.add(name)
        else:
            self.sim.down.discard(name)
        self._changed()

    def delete_reservation(self, name: str) -> None:
        if name not in self.res:
            raise SlurmError(["scontrol", "delete", f"ReservationName={name}"], 1,
                             "Invalid reservation name")
        sim = self.sim
        if name in sim.attached.values() or any(
                sim.started_in.get(sim.jobs[i].job_id) == name for i in sim.placed):
            # Slurm keeps a reservation any job points at, pending or running
            raise SlurmError(["scontrol", "delete", f"ReservationName={name}"], 1,
                             "Requested reservation is in use")
        self._drop(name)

    def _drop(self, name: str) -> None:
        r = self.res.pop(name)
        if r.window:
            self._windows(set(r.nodes))
            return
        self._changed(r.nodes)
        for n in r.nodes:
            if self.sim.by_name[n].resv == name:
                self.sim.by_name[n].resv = None
        for idx in [i for i, v in self.sim.attached.items() if v == name]:
            del self.sim.attached[idx]  # (at its end) NO_HOLD_JOBS_AFTER: pending, not held
        for job_id in [j for j, v in self.sim.started_in.items() if v == name]:
            del self.sim.started_in[job_id]
        self._changed()

    def _expire(self) -> None:
        """Slurm ends a reservation at its end time."""
        for name in [n for n, r in self.res.items() if r.end <= self.now]:
            self._drop(name)

    def end_of(self, name: str) -> float | None:
        r = self.res.get(name)
        return None if r is None else r.end
