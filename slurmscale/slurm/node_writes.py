"""One node read per pass: a SlurmClient that remembers which nodes the pass has changed.

A daemon pass reads every node once (`scontrol show node`: at 5,000 nodes a large part of a
pass) and hands that read to its passes in order: interruptions' returns, capacity backoff,
addresses, health, blocks - which drain, undrain, power down and reserve nodes - and last
the capacity pass, which must decide on the nodes as they are AFTER those writes (a node
the backoff just drained is not idle capacity; one it returned is). Rather than a second
full read, the pass re-reads only the nodes it wrote to since the read; a write whose nodes
cannot be named (a requeue moves a job off nodes, a deleted reservation frees its nodes)
makes the capacity pass read them all again, as it did before.
"""

from __future__ import annotations

from typing import Any

from slurmscale.model import SlurmNode
from slurmscale.slurm.protocol import SlurmClient


class NodeWrites:
    """Wraps a SlurmClient (everything passes through); `since_read` says what changed."""

    def __init__(self, inner: SlurmClient) -> None:
        self.inner = inner
        self.touched: set[str] = set()
        self.unknown = False  # a write changed nodes it does not name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def nodes(self, names: list[str] | None = None) -> list[SlurmNode]:
        read = self.inner.nodes(names)
        if names is None:
            self.touched, self.unknown = set(), False
        return read

    def current(self, read: list[SlurmNode]) -> list[SlurmNode] | None:
        """`read` (this pass's full read) brought up to date with the nodes written since:
        re-reads just those; None when a write's nodes are unknown (read them all). Raises
        SlurmError as a read does."""
        if self.unknown:
            return None
        if not self.touched:
            return read
        fresh = {n.name: n for n in self.inner.nodes(sorted(self.touched))}
        return [fresh.get(n.name, n) for n in read]

    def _wrote(self, names: list[str] | tuple[str, ...]) -> None:
        self.touched.update(names)

    # --- the writes that change nodes -----------------------------------------------------
    def set_node_address(self, name: str, addr: str, hostname: str) -> None:
        self._wrote([name])
        self.inner.set_node_address(name, addr, hostname)

    def set_node_addresses(self, entries: list[tuple[str, str, str]]) -> None:
        self._wrote([e[0] for e in entries])
        self.inner.set_node_addresses(entries)

    def power_down_force(self, names: list[str], reason: str) -> None:
        self._wrote(names)
        self.inner.power_down_force(names, reason)

    def power_down(self, names: list[str]) -> None:
        self._wrote(names)
        self.inner.power_down(names)

    def power_up(self, names: list[str]) -> None:
        self._wrote(names)
        self.inner.power_up(names)

    def drain(self, names: list[str], reason: str) -> None:
        self._wrote(names)
        self.inner.drain(names, reason)

    def undrain(self, names: list[str]) -> None:
        self._wrote(names)
        self.inner.undrain(names)

    def create_reservation(self, name: str, nodes: list[str], users: list[str],
                           duration_s: float) -> None:
        self._wrote(nodes)
        self.inner.create_reservation(name, nodes, users, duration_s)

    def create_window_reservation(self, name: str, nodes: list[str], users: list[str],
                                  start_s: float | None, end_s: float) -> None:
        self._wrote(nodes)
        self.inner.create_window_reservation(name, nodes, users, start_s, end_s)

    def update_window_reservation(self, name: str, nodes: list[str], start_s: float | None,
                                  end_s: float) -> None:
        self.unknown = True  # (the nodes it leaves are not named)
        self.inner.update_window_reservation(name, nodes, start_s, end_s)

    def set_reservation_nodes(self, name: str, nodes: list[str]) -> None:
        self.unknown = True
        self.inner.set_reservation_nodes(name, nodes)

    def delete_reservation(self, name: str) -> None:
        self.unknown = True
        self.inner.delete_reservation(name)

    def requeue(self, job_id: str, node: str = "") -> None:
        self.unknown = True
        self.inner.requeue(job_id, node)
