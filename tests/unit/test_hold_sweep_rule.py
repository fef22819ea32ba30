"""The hold sweep's verdict (tests/benchmarks/hold_sweep.py): issue 33's rule on the medians of
the per-replica ratios holds on / off, "starving" counted in the boots the cells ran with."""

from __future__ import annotations

from typing import Any

from tests.benchmarks.hold_sweep import boot_s, ratios, verdict

KEYS = ("gang_wait_p50_s", "gang_wait_p95_s", "wait_p50_s", "wait_p95_s", "idle_gpu_hours")


def cell(gang_p50: list[float], rest: float = 100.0) -> dict[str, Any]:
    each = [{**{k: rest for k in KEYS}, "gang_wait_p50_s": g} for g in gang_p50]
    return {"gang_wait_p50_s": sorted(gang_p50)[len(gang_p50) // 2], "each": each}


def test_boot_time_is_read_from_the_arguments_for_simulate() -> None:
    assert boot_s(()) == 300.0
    assert boot_s(("--max-hold", "3600", "--boot-time", "600")) == 600.0
    assert boot_s(("--boot-time=120",)) == 120.0


def test_starving_is_ten_boots_of_the_cells_own_boot_time() -> None:
    off = cell([4000.0, 4000.0, 4000.0])  # 13 boots of 300 s, 6.7 of 600 s
    on = cell([2000.0, 2400.0, 3600.0])  # gang p50 0.6x at the median replica
    r = ratios(on, off)
    assert r["gang_wait_p50_s"] == (0.6, 0.5, 0.9)
    assert verdict(off, r) == (True, "", True)
    # at 600 s boots the same gangs do not starve, and any figure above 1.05x breaks it
    worse = ratios(cell([4400.0, 4400.0, 4400.0]), off)
    assert verdict(off, worse, 600.0) == (False, "gang p50 1.10x > 1.05x", False)
    assert verdict(off, worse, 300.0) == (False, "gang p50 1.10x > 0.7x", True)
