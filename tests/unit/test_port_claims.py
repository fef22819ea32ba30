"""Clusters started side by side (pytest-xdist) must never pick the same port, even one a
slurmd binds only when its node boots minutes later."""

from __future__ import annotations

import subprocess
import sys

from slurmscale.localcluster import procs
from slurmscale.localcluster.procs import _claim, free_port_range, release_port_range


def test_claimed_ranges_do_not_overlap_and_avoid_ephemeral_ports(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(procs, "PORT_CLAIMS", tmp_path)
    got = [free_port_range(10) for _ in range(50)]
    ports = [p for b in got for p in range(b, b + 10)]
    assert len(ports) == len(set(ports))
    assert max(ports) < procs._ephemeral_low()
    for b in got:
        release_port_range(b, 10)
    assert list(tmp_path.iterdir()) == []


def test_a_dead_owners_claim_is_taken_over_a_live_ones_is_not(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(procs, "PORT_CLAIMS", tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "15000").write_text(dead)
    assert _claim(15000)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "15001").write_text(str(live.pid))
        assert not _claim(15001)
    finally:
        live.kill()
        live.wait()
