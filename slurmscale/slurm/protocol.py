"""The one Slurm protocol every backend (the CLI today, pyslurm later) implements."""

from __future__ import annotations

from typing import Protocol

from slurmscale.model import QueueJob, SlurmNode, SlurmReservation


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

    def power_down_force(self, names: list[str], reason: str) -> None: ...

    def power_down(self, names: list[str]) -> None: ...

    def drain(self, names: list[str], reason: str) -> None: ...

    def undrain(self, names: list[str]) -> None: ...

    def reservations(self) -> list[SlurmReservation]: ...

    def create_reservation(self, name: str, nodes: list[str], users: list[str],
                           duration_s: float) -> None: ...

    def set_reservation_nodes(self, name: str, nodes: list[str]) -> None: ...

    def delete_reservation(self, name: str) -> None: ...

    def set_job_reservation(self, job_id: str, name: str) -> None: ...

    def pending_jobs(self) -> list[QueueJob]: ...

    def active_jobs(self) -> list[QueueJob]: ...

    def job(self, job_id: int | str) -> dict[str, str]: ...
