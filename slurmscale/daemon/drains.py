"""Lifting slurmscale's own drains, the one way: undrain, then one audit event (or one event
saying Slurm refused)."""

from __future__ import annotations

from slurmscale.audit import Event, Kind
from slurmscale.daemon import edits
from slurmscale.daemon.edits import SlurmEdits
from slurmscale.hostlists import compress
from slurmscale.slurm.protocol import SlurmClient


def undrain(slurm: SlurmClient, event: Event, names: list[str], kind: Kind,
            why: str) -> bool:
    if not names:
        return False
    return SlurmEdits(slurm, event).apply(
        edits.undrain(names, said=(kind, f"{compress(names)}: {why}")))
