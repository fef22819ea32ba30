"""The one Slurm protocol every backend (the CLI today, pyslurm later) implements."""

from __future__ import annotations

from typing import Protocol

from slurmscale.model import (
    JobPriority,
    PriorityWeights,
    QueueJob,
    SlurmNode,
    SlurmReservation,
)


class SlurmError(RuntimeError):
    """A Slurm command failed; carries the command and its stderr so nothing is ignored."""

    def __init__(self, cmd: list[str], returncode: int | None, stderr: str) -> None:
        self.cmd = cmd
        self.returncode = returncode
        self.stderr = stderr.strip()
        what = "timed out" if returncode is None else f"exited {returncode}"
        super().__init__(f"{' '.join(cmd)} {what}: {self.stderr or '(no stderr)'}")


class SlurmClient(Protocol):
    def nodes(self, names: list[str] | None = None) -> list[SlurmNode]: ...

    def set_node_address(self, name: str, addr: str, hostname: str) -> None: ...

    def set_node_addresses(self, entries: list[tuple[str, str, str]]) -> None:
        """(name, addr, hostname) of several nodes (a gang) in one update."""
        ...

    def power_down_force(self, names: list[str], reason: str) -> None: ...

    def power_down(self, names: list[str]) -> None: ...

    def power_up(self, names: list[str]) -> None: ...

    def set_job_partitions(self, job_id: str, partitions: list[str]) -> None: ...

    def drain(self, names: list[str], reason: str) -> None: ...

    def undrain(self, names: list[str]) -> None: ...

    def reservations(self) -> list[SlurmReservation]: ...

    def create_reservation(self, name: str, nodes: list[str], users: list[str],
                           duration_s: float) -> None: ...

    def create_window_reservation(self, name: str, nodes: list[str], users: list[str],
                                  start_s: float | None, end_s: float) -> None: ...

    def update_window_reservation(self, name: str, nodes: list[str], start_s: float | None,
                                  end_s: float) -> None: ...

    def set_reservation_nodes(self, name: str, nodes: list[str]) -> None: ...

    def delete_reservation(self, name: str) -> None: ...

    def partition_states(self) -> dict[str, str]:
        """Each partition's State (UP, DOWN, DRAIN, INACTIVE)."""
        ...

    def set_partition_state(self, name: str, state: str) -> None: ...

    def set_job_reservation(self, job_id: str, name: str) -> None: ...

    def jobs_on_node(self, node: str) -> list[str]: ...

    def requeue(self, job_id: str, node: str = "") -> None:
        """The whole job (every node of a gang) back to the queue, never FAILED. `node`: the
        one it is requeued off (its instance going away), where the release can use it."""
        ...

    def signal_job(self, job_id: str, signal: str, full: bool) -> None:
        """Send `signal` (a name: USR1) to a running job's batch shell, or with `full` to the
        shell and every step (`scancel --signal --batch|--full`): the job is not ended."""
        ...

    def reconfigure(self) -> None:
        """slurmctld re-reads its config files (`scontrol reconfigure`): topology.conf is
        read at start and on it only."""
        ...

    def pending_jobs(self) -> list[QueueJob]: ...

    def active_jobs(self) -> list[QueueJob]: ...

    def ended_jobs(self) -> list[QueueJob]: ...

    def priorities(self) -> list[JobPriority]: ...

    def priority_weights(self) -> PriorityWeights | None: ...

    def job(self, job_id: int | str) -> dict[str, str]: ...

    def suspend_exc_nodes(self) -> str | None:
        """SuspendExcNodes as slurmctld has it now ("" when empty); None when this Slurm
        cannot change it at run time (before 23.02)."""
        ...

    def set_suspend_exc_nodes(self, value: str) -> None: ...

    def set_node_instances(self, entries: list[tuple[str, str, str]]) -> bool:
        """(node, instance id, instance type) into Slurm's node record ("": cleared); False
        where this Slurm has no such fields (before 23.02)."""
        ...
