"""The simulator against real Slurm: a trace replayed on the local cluster (real slurmctld and
slurmd, moto, the daemon) by `python -m slurmscale.localcluster.replay`, a whole process as a
user runs it, then simulated with the settings the replay reports (`simulate_args`).

The 40-job ITP slice (3 gangs of 2 and 4 nodes, 37 single-node jobs, a 5-node cap) at 200x:
the same jobs complete, the gangs start in the same order, and wait p50/p95 (all jobs, gangs)
agree within what the replay cannot resolve: slurmctld's once-a-second wake-up, whose phase the
simulator does not know, one poll of the queue (0.2 s real), the daemon's pass and batch window
(0.5 s each), slurmd's start after the boot delay (~1 s) and the load of a shared CI machine:
3 s real, 600 trace seconds at 200x. Measured: every start within 132 s, p50 within 84 s
(docs/simulator.md). Before `simulate_args` carried Slurm's own clocks (backfill's and the
main scheduler's 1 s, 200 trace s here) the simulator started a job the moment its nodes
freed, the replay's starts fell up to 1 s real further behind per start in a chain, and a
loaded CI run measured 880 s on the p50. Holds are off: with them the two disagree, which is
issue 16's to settle.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import _require_slurm

SLICE = Path(__file__).resolve().parents[1] / "data" / "traces" / "itp_cluster04_slice40.csv"
SCALE = 200
TOLERANCE_S = 3 * SCALE


def test_a_replay_on_real_slurm_and_the_simulator_agree_on_an_itp_slice(
        tmp_path: Path) -> None:
    _require_slurm()
    sim_trace = tmp_path / "sim.csv"
    p = subprocess.run([sys.executable, "-m", "slurmscale.localcluster.replay", "--trace",
                        str(SLICE), "--time-scale", str(SCALE), "--max-nodes", "5",
                        "--sim-trace", str(sim_trace), "--no-accumulate", "--json",
                        "--deadline", "1200"],
                       capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-4000:]
    real = json.loads(p.stdout)
    assert real["slurm_model"] == "real"
    q = subprocess.run([sys.executable, "-m", "slurmscale", "simulate",
                        *real["simulate_args"], "--json"], capture_output=True, text=True,
                       timeout=120)
    assert q.returncode == 0, q.stderr
    sim = json.loads(q.stdout)["policies"]["slurmscale"]
    got = real["policies"]["slurmscale"]
    assert set(got) == set(sim), "the replay prints simulate's JSON"
    assert got["jobs_completed"] == sim["jobs_completed"] == 40
    assert got["gang_start_order"] == sim["gang_start_order"] == [
        "fc678bef", "3fb32962", "0709e2e0"]
    for key in ("wait_p50_s", "wait_p95_s", "gang_wait_p50_s", "gang_wait_p95_s"):
        assert abs(got[key] - sim[key]) <= TOLERANCE_S, (key, got[key], sim[key], real)
