"""The Slurm CLI backend: `scontrol`, `squeue`, `sinfo` run with a timeout, by configured path.

Hooks and the daemon may run without PATH (slurmctld gives its helpers almost no
environment), so every binary is called by its configured absolute path, optionally behind a
`command_prefix` (a chroot, ssh to the head node, ...). A non-zero exit is an error carrying
stderr; nothing is silently ignored.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Protocol, TypeVar

from slurmscale import timeframe
from slurmscale.hostlists import compress, expand
from slurmscale.model import (
    JobPriority,
    PriorityWeights,
    QueueJob,
    SlurmNode,
    SlurmReservation,
)
from slurmscale.slurm.kv import (
    EXPEDITED_REQUEUE,
    EXPEDITING,
    SPRIO_FORMAT,
    SQUEUE_FORMAT,
    LineMemo,
    parse_node_line,
    parse_oneliner,
    parse_reservations,
    parse_show_config,
    parse_sprio,
    parse_squeue_fixed,
    priority_weights,
    release_of,
)
from slurmscale.slurm.protocol import SlurmError
from slurmscale.slurm.reasons import INSTANCE_LOST, ours

log = logging.getLogger(__name__)

T = TypeVar("T")


def _local(t: float) -> str:
    """The daemon's time (timeframe.py) as scontrol takes a time: slurmctld's local time,
    by the host's clock as it reads now."""
    return datetime.fromtimestamp(timeframe.FRAME.to_host(t)).strftime("%Y-%m-%dT%H:%M:%S")

# squeue -t: the states of a job that has ended (a requeued job is PENDING again, not here)
ENDED_STATES = "CD,CA,F,TO,OOM,NF,PR,DL"


def _alloc_gpus(tres: str) -> int:
    """AllocTRES=cpu=2,gres/gpu=4 (typed GPUs add gres/gpu:h100=4 beside it) -> 4."""
    for item in tres.split(","):
        key, _, val = item.partition("=")
        if key == "gres/gpu" and val.isascii() and val.isdigit():
            return int(val)
    return 0


def _parse_nodes(lines: Iterable[str],
                 memo: LineMemo[SlurmNode] | None = None) -> list[SlurmNode]:
    """`scontrol show node -o`, a node a line (as streamed: newline kept); with `memo`, a
    line the last read printed too is not parsed again (a node at rest prints the same)."""
    nodes: list[SlurmNode] = []
    last = memo.last if memo is not None else {}
    fresh: dict[str, SlurmNode] = {}
    for line in lines:
        node = last.get(line) if last else None
        if node is not None:
            nodes.append(node)
            fresh[line] = node
            continue
        if not line.startswith("NodeName="):
            continue
        kv = parse_node_line(line.rstrip("\n"))
        node = SlurmNode(
            name=kv.get("NodeName", ""),
            state=kv.get("State", ""),
            addr=kv.get("NodeAddr", ""),
            hostname=kv.get("NodeHostName", ""),
            reason=kv.get("Reason", ""),
            partitions=tuple(p for p in kv.get("Partitions", "").split(",") if p),
            last_busy=kv.get("LastBusyTime", ""),
            alloc_gpus=_alloc_gpus(kv.get("AllocTRES", "")),
        )
        nodes.append(node)
        if memo is not None:
            fresh[line] = node
    if memo is not None:
        memo.last = fresh
    return nodes


class CommandSettings(Protocol):
    """How to reach Slurm's commands: the config's `slurm` section is one (the Slurm
    boundary needs no more of the config than this)."""

    @property
    def bin_dir(self) -> str: ...

    @property
    def command_prefix(self) -> list[str]: ...

    @property
    def conf(self) -> str | None: ...

    @property
    def timeout_s(self) -> float: ...


class SlurmCLI:
    def __init__(self, settings: CommandSettings, remember: bool = False) -> None:
        """`remember`: keep each squeue and node read's lines for the next read (the
        daemon's, pass after pass: a pass parses what changed; ~10 MB at 50,000 jobs that a
        command reading Slurm once would keep for nothing)."""
        self.s = settings
        self._release: tuple[int, int] | None = None
        self.remember = remember
        # per squeue state filter: its last read's lines (a pass parses what changed)
        self._squeue_lines: dict[str, LineMemo[QueueJob]] = {}
        self._node_lines: LineMemo[SlurmNode] = LineMemo()  # (the whole node read's)

    def _bin(self, name: str) -> str:
        return str(Path(self.s.bin_dir) / name)

    def _cmd(self, tool: str, args: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
        cmd = [*self.s.command_prefix, self._bin(tool), *args]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
        if self.s.conf:
            env["SLURM_CONF"] = self.s.conf
        elif "SLURM_CONF" in os.environ:
            env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        return cmd, env

    def run_parsed(self, parse: Callable[[Iterable[str]], T], tool: str, *args: str) -> T:
        """`parse` over the command's output lines as they arrive (each with its newline).
        squeue prints a 30,000-job queue over the last third of its run: parsed this way,
        the parse runs while squeue still prints, not after it. Errors as `run`: the
        command's exit status and stderr, or its timeout, raise SlurmError (and whatever
        was parsed is dropped)."""
        cmd, env = self._cmd(tool, args)
        with tempfile.TemporaryFile() as err:
            try:
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                     env=env, stdin=subprocess.DEVNULL)
            except OSError as e:
                raise SlurmError(cmd, 127, str(e)) from None
            timer = threading.Timer(self.s.timeout_s, p.kill)
            timer.start()
            try:
                assert p.stdout is not None
                with p.stdout:
                    result = parse(p.stdout)
                    for _ in p.stdout:  # a parser that stopped early: drain, never block
                        pass
                code = p.wait()
            finally:
                timer.cancel()
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if code != 0:
                err.seek(0)
                text = err.read().decode(errors="replace")
                # killed by the timer: no exit status, as `run` reports a timeout
                raise SlurmError(cmd, None if code == -signal.SIGKILL else code, text)
        return result

    def run(self, tool: str, *args: str, timeout: float | None = None) -> str:
        cmd, env = self._cmd(tool, args)
        try:
            p = subprocess.run(
                cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                timeout=timeout or self.s.timeout_s, check=False,
            )
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise SlurmError(cmd, None, err) from None
        except OSError as e:
            raise SlurmError(cmd, 127, str(e)) from None
        if p.returncode != 0:
            raise SlurmError(cmd, p.returncode, p.stderr)
        return p.stdout

    def scontrol(self, *args: str) -> str:
        return self.run("scontrol", *args)

    def nodes(self, names: list[str] | None = None) -> list[SlurmNode]:
        args = ["show", "node", "-o"]
        if names:
            args.insert(2, compress(names))
        # (the whole node read's lines only: a read of a few nodes would replace them)
        memo = self._node_lines if self.remember and not names else None
        return self.run_parsed(lambda lines: _parse_nodes(lines, memo), "scontrol", *args)

    def set_node_address(self, name: str, addr: str, hostname: str) -> None:
        self.scontrol("update", f"nodename={name}", f"nodeaddr={addr}",
                      f"nodehostname={hostname}")

    def set_node_addresses(self, entries: list[tuple[str, str, str]]) -> None:
        # slurmctld pairs a node list with address and hostname lists of the same length,
        # in order: one update for a whole gang (it was one scontrol per node)
        names, addrs, hosts = (",".join(col) for col in zip(*entries, strict=True))
        self.scontrol("update", f"nodename={names}", f"nodeaddr={addrs}",
                      f"nodehostname={hosts}")

    def power_down_force(self, names: list[str], reason: str) -> None:
        self.scontrol("update", f"nodename={compress(names)}", "state=POWER_DOWN_FORCE",
                      f"reason={reason}")

    def power_down(self, names: list[str]) -> None:
        # Not FORCE: a job that landed since the node was read idle keeps running and the
        # node powers down after it (Slurm then runs SuspendProgram as for SuspendTime).
        self.scontrol("update", f"nodename={compress(names)}", "state=POWER_DOWN")

    def power_up(self, names: list[str]) -> None:
        # Slurm runs ResumeProgram for them as for a job; they come up IDLE.
        self.scontrol("update", f"nodename={compress(names)}", "state=POWER_UP")

    def set_job_partitions(self, job_id: str, partitions: list[str]) -> None:
        # Only a pending job can move; Slurm refuses (and says why) otherwise.
        self.scontrol("update", f"jobid={job_id}", f"partition={','.join(partitions)}")

    def drain(self, names: list[str], reason: str) -> None:
        self.scontrol("update", f"nodename={compress(names)}", "state=DRAIN",
                      f"reason={reason}")

    def undrain(self, names: list[str]) -> None:
        self.scontrol("update", f"nodename={compress(names)}", "state=UNDRAIN")

    def _jobs(self, states: str) -> list[QueueJob]:
        # -S i: sorting by job id alone is the cheapest order for squeue at 30,000 jobs
        memo = self._squeue_lines.setdefault(states, LineMemo()) if self.remember else None
        return self.run_parsed(lambda lines: parse_squeue_fixed(lines, memo), "squeue", "-h",
                               "-t", states, "-S", "i", "-O", SQUEUE_FORMAT)

    def reservations(self) -> list[SlurmReservation]:
        return parse_reservations(self.scontrol("show", "reservation", "-o"))

    def create_reservation(self, name: str, nodes: list[str], users: list[str],
                           duration_s: float) -> None:
        # IGNORE_JOBS: busy nodes may be taken in and drain into it; NO_HOLD_JOBS_AFTER:
        # deleting it must never leave its job held.
        self.scontrol("create", "reservation", f"ReservationName={name}", "StartTime=now",
                      f"Duration={max(1, round(duration_s / 60))}", f"Nodes={compress(nodes)}",
                      f"Users={','.join(users)}", "Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER")

    def create_window_reservation(self, name: str, nodes: list[str], users: list[str],
                                  start_s: float | None, end_s: float) -> None:
        """A reservation over a time window (Unix seconds; start None: now), in slurmctld's
        local time as scontrol takes it. IGNORE_JOBS: running jobs are requeued by
        slurmscale at the window's start, the reservation must not wait for them."""
        self.scontrol("create", "reservation", f"ReservationName={name}",
                      "StartTime=now" if start_s is None else f"StartTime={_local(start_s)}",
                      f"EndTime={_local(end_s)}", f"Nodes={compress(nodes)}",
                      f"Users={','.join(users)}", "Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER")

    def update_window_reservation(self, name: str, nodes: list[str], start_s: float | None,
                                  end_s: float) -> None:
        """Move a window reservation in place (start None: leave the start as it is)."""
        self.scontrol("update", f"ReservationName={name}",
                      *([f"StartTime={_local(start_s)}"] if start_s is not None else []),
                      f"EndTime={_local(end_s)}", f"Nodes={compress(nodes)}")

    def set_reservation_nodes(self, name: str, nodes: list[str]) -> None:
        # the full list: Slurm 22.05 refuses Nodes+=
        self.scontrol("update", f"ReservationName={name}", f"Nodes={compress(nodes)}")

    def delete_reservation(self, name: str) -> None:
        self.scontrol("delete", f"ReservationName={name}")

    def partition_states(self) -> dict[str, str]:
        out = {}
        for line in self.scontrol("show", "partition", "-o").splitlines():
            kv = parse_oneliner(line)
            if "PartitionName" in kv:
                out[kv["PartitionName"]] = kv.get("State", "")
        return out

    def set_partition_state(self, name: str, state: str) -> None:
        self.scontrol("update", f"PartitionName={name}", f"State={state}")

    def set_job_reservation(self, job_id: str, name: str) -> None:
        self.scontrol("update", f"JobId={job_id}", f"Reservation={name}")

    def jobs_on_node(self, node: str) -> list[str]:
        out = self.run("squeue", "-h", "-w", node, "-t", "CF,R", "-o", "%i")
        return [x.strip() for x in out.split() if x.strip()]

    def requeue(self, job_id: str, node: str = "") -> None:
        """`scontrol requeue`, or on Slurm 25.11+ for a job submitted with
        `--requeue=expedite`, its `node` set DOWN with the reason slurmscale drained it for
        (its instance going away): Slurm's expedited requeue then restarts the job first, at
        once. An explicit `scontrol requeue` spares such a job the requeue delay but keeps its
        priority (shown on 26.05: a job of higher priority took the nodes first); a failed node
        is what Slurm expedites (sbatch(1) --requeue; slurm.conf(5) enable_expedited_requeue)."""
        why = self._expedite_off(job_id, node) if node else None
        if why is not None:
            self.scontrol("update", f"NodeName={node}", "State=DOWN", f"Reason={why}")
            return
        self.scontrol("requeue", job_id)

    def _expedite_off(self, job_id: str, node: str) -> str | None:
        """The reason to set `node` DOWN with so Slurm expedites the job's requeue: the
        node's own, when it is slurmscale's for an instance going away; None: requeue it."""
        if self.release() < EXPEDITED_REQUEUE:
            return None
        job = self.job(job_id)
        if job.get("ExpeditedRequeue") != "Yes" or node not in expand(job.get("NodeList", "")):
            return None
        said = next((n.reason for n in self.nodes([node])), "")
        said = said.split(" [", 1)[0]  # (Slurm appends [user@time])
        return said if ours(said) in INSTANCE_LOST else None

    def signal_job(self, job_id: str, signal: str, full: bool) -> None:
        # (without --batch or --full, scancel signals the steps only, and a batch script
        # that runs no srun step would never see it)
        self.run("scancel", f"--signal={signal}", "--full" if full else "--batch", job_id)

    def reconfigure(self) -> None:
        self.scontrol("reconfigure")

    def _pending_states(self) -> str:
        """squeue -t for pending jobs: on 25.11+ with the expedited requeues waiting to
        restart (kv.EXPEDITING), which `PD` leaves out; the parser reads them as PENDING.
        (squeue's read does not wait on scontrol's: a release not known yet is asked again
        next time, the read done as on any release.)"""
        try:
            expedites = self.release() >= EXPEDITED_REQUEUE
        except SlurmError:
            expedites = False
        return "PD" + (f",{EXPEDITING}" if expedites else "")

    def pending_jobs(self) -> list[QueueJob]:
        return [j for j in self._jobs(self._pending_states()) if j.state == "PENDING"]

    def active_jobs(self) -> list[QueueJob]:
        # Pending (demand) and starting/running (recent arrivals, for the reuse forecast) in
        # one fixed-field read.
        return self._jobs(self._pending_states() + ",CF,R")

    def ended_jobs(self) -> list[QueueJob]:
        # Slurm keeps an ended job for MinJobAge (300 s by default): a job that started and
        # ended between two passes is found here. Those that never got nodes are left out.
        return [j for j in self._jobs(ENDED_STATES) if j.nodelist and j.start_time]

    def priorities(self) -> list[JobPriority]:
        """The pending jobs' priorities and their weighted factors (`sprio`, fixed fields)."""
        return parse_sprio(self.run("sprio", "-h", "-o", SPRIO_FORMAT))

    def priority_weights(self) -> PriorityWeights | None:
        """The age weights priority/multifactor uses (`scontrol show config`)."""
        return priority_weights(parse_show_config(self.scontrol("show", "config")))

    def suspend_exc_nodes(self) -> str | None:
        # 23.02 added SuspendExcStates and run-time updates of the SuspendExc* lists together;
        # 22.05 has neither, and takes `scontrol update SuspendExcNodes=` silently as a no-op
        conf = parse_show_config(self.scontrol("show", "config"))
        if "SuspendExcStates" not in conf:
            return None
        value = conf.get("SuspendExcNodes", "")
        return "" if value == "(null)" else value

    def release(self) -> tuple[int, int]:
        """Slurm's release as (major, minor), from `scontrol --version`, asked once."""
        if self._release is None:
            self._release = release_of(self.scontrol("--version")) or (0, 0)
        return self._release

    def set_node_instances(self, entries: list[tuple[str, str, str]]) -> bool:
        """(node, instance id, instance type) into each node's InstanceId/InstanceType ("":
        cleared). False, nothing written, before 23.02 (22.05's scontrol has neither field).
        26.05 pairs a node list with lists of values, as it does NodeAddr, and takes one
        value (an empty one: cleared) for the whole list, but refuses a list of empty values
        ("Invalid node name specified", slurmctld/node_mgr.c's count check); 24.11 gives every
        node of the list the whole string, so there one update per distinct value."""
        if not entries:
            return True
        rel = self.release()
        if rel < (23, 2):
            return False
        if rel >= (26, 5):
            cleared = [n for n, iid, itype in entries if not iid and not itype]
            if cleared:
                self.scontrol("update", f"nodename={compress(cleared)}", "instanceid=",
                              "instancetype=")
            given = [e for e in entries if e[1] or e[2]]
            if given:
                names, ids, types = (",".join(col) for col in zip(*given, strict=True))
                self.scontrol("update", f"nodename={names}", f"instanceid={ids}",
                              f"instancetype={types}")
            return True
        same: dict[tuple[str, str], list[str]] = {}
        for node, iid, itype in entries:
            same.setdefault((iid, itype), []).append(node)
        for (iid, itype), nodes in same.items():
            self.scontrol("update", f"nodename={compress(nodes)}", f"instanceid={iid}",
                          f"instancetype={itype}")
        return True

    def set_suspend_exc_nodes(self, value: str) -> None:
        self.scontrol("update", f"SuspendExcNodes={value}")

    def job(self, job_id: int | str) -> dict[str, str]:
        out = self.scontrol("show", "job", "-o", str(job_id))
        return parse_oneliner(out.strip().splitlines()[0]) if out.strip() else {}
