"""Lifting slurmscale's own drains, the one way: undrain, then one audit event (or one event
saying Slurm refused)."""

from __future__ import annotations

from slurmscale.audit import Event, Kind
from slurmscale.hostlists import compress
from slurmscale.slurm.protocol import SlurmClient, SlurmError


def undrain(slurm: SlurmClient, event: Event, names: list[str], kind: Kind,
            why: str) -> bool:
    if not names:
        return False
    expr = compress(names)
    try:
        slurm.undrain(names)
    except SlurmError as e:
        event(Kind.SLURM_UPDATE_FAILED, f"undrain {expr}: {e}", node=expr)
        return False
    event(kind, f"{expr}: {why}", node=expr)
    return True
