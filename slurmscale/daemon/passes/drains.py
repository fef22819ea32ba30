"""Lifting slurmscale's own drains, the one way: undrain, then one audit event (or one event
saying Slurm refused)."""

from __future__ import annotations

from slurmscale.audit import Kind
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.edits import SlurmEdits
from slurmscale.hostlists import compress


def undrain(sent: SlurmEdits, names: list[str], kind: Kind, why: str) -> bool:
    """`sent`: the pass's executor's edits (`PassContext.edits`)."""
    if not names:
        return False
    return sent.apply(
        edits.undrain(names, said=(kind, f"{compress(names)}: {why}")))
