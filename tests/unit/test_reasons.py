"""slurmscale's Slurm reasons: one module writes them and answers whether a node is ours."""

from __future__ import annotations

from slurmscale.model import SlurmNode
from slurmscale.slurm.reasons import INSTANCE_LOST, Why, drained_by_us, ours, reason


def test_each_reason_it_writes_is_recognised_and_an_admins_never() -> None:
    for why in Why:
        assert ours(reason(why, "2026-11-30T12:00:00Z detail")) is why
        assert ours(reason(why)) is why
    for admin in ("", "maintenance", "slurmscale is down for upgrade", "Not responding",
                  "SLURMSCALE: held above the pool's target"):
        assert ours(admin) is None


def test_drained_by_us_needs_the_drain_flag() -> None:
    held = reason(Why.HELD)
    assert drained_by_us(SlurmNode("n1", "IDLE+DRAIN+CLOUD", "n1", "n1", held)) is Why.HELD
    assert drained_by_us(SlurmNode("n1", "IDLE+CLOUD", "n1", "n1", held)) is None
    gone = reason(Why.GONE, "i-1 terminated at 2026")
    assert drained_by_us(SlurmNode("n1", "DOWN+DRAIN+CLOUD+POWERED_DOWN", "n1", "n1",
                                   gone)) in INSTANCE_LOST
