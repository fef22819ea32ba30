"""Replicas: copies of a trace with jittered submit times (seeded), every figure's median and
range over them, ratios taken within each copy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from slurmscale.cli import cli
from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud
from slurmscale.sim.replicas import Settings, jittered, run_replicas, summarise
from slurmscale.sim.trace import TraceJob

JOBS = [TraceJob("carried", 0.0, 3600.0, 8, 1, carry_in=True),
        TraceJob("g1", 0.0, 1800.0, 32, 4), TraceJob("one", 100.0, 600.0, 8, 1),
        TraceJob("g2", 3 * 3600.0, 1800.0, 32, 4)]


def test_jitter_moves_submits_later_by_at_most_s_seeded_and_leaves_carry_in() -> None:
    a, b, c = jittered(JOBS, 60.0, 1), jittered(JOBS, 60.0, 1), jittered(JOBS, 60.0, 2)
    assert a == b and a != c
    by_id = {j.job_id: j for j in a}
    assert by_id["carried"].submit_s == 0.0
    for j in JOBS[1:]:
        assert j.submit_s <= by_id[j.job_id].submit_s <= j.submit_s + 60.0
    assert [j.submit_s for j in a] == sorted(j.submit_s for j in a)
    assert jittered(JOBS, 0.0, 1) is JOBS


def test_replicas_summarise_each_figure_and_the_ratios_within_each_copy() -> None:
    s = Settings(("immediate", "oracle"), PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=4),
                 None, SimCloud(boot_s=300.0))
    reps = run_replicas(JOBS, s, 3, 120.0, 7)
    assert len(reps) == 3 and all(set(r) == {"immediate", "oracle"} for r in reps)
    out = summarise(reps)
    idle = sorted(r["immediate"]["idle_gpu_hours"] for r in reps)
    assert out["immediate"]["idle_gpu_hours"] == {"median": idle[1], "min": idle[0],
                                                  "max": idle[2]}
    ratios = sorted(r["immediate"]["idle_vs_oracle"] for r in reps)
    assert out["immediate"]["idle_vs_oracle"]["median"] == ratios[1]  # per copy, then median
    assert "gang_start_order" not in out["immediate"]  # (a list: not summarised)
    assert out["oracle"]["idle_vs_oracle"] == {"median": 1.0, "min": 1.0, "max": 1.0}


def test_the_cli_prints_medians_and_refuses_a_plot_of_replicas(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes\n"
                     "a,0,1800,32,4\nb,100,600,8,1\nc,10800,1800,32,4\n")
    args = ["simulate", "--trace", str(trace), "--max-nodes", "4", "--policy", "immediate",
            "--policy", "oracle", "--replicas", "2", "--jitter", "30"]
    r = CliRunner().invoke(cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["replicas"], out["jitter_s"]) == (2, 30.0)
    assert set(out["policies"]["immediate"]["wait_p95_s"]) == {"median", "min", "max"}
    # replica by replica, numbers only, the summary's min and max among them
    assert len(out["each"]) == 2
    p95 = [r["immediate"]["wait_p95_s"] for r in out["each"]]
    assert (min(p95), max(p95)) == (out["policies"]["immediate"]["wait_p95_s"]["min"],
                                    out["policies"]["immediate"]["wait_p95_s"]["max"])
    assert all(isinstance(v, int | float) for r in out["each"] for v in r["immediate"].values())
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0 and "median [min-max]" in text.output
    bad = CliRunner().invoke(cli, [*args, "--plot", str(tmp_path / "p.png")])
    assert bad.exit_code == 2 and "not with --replicas above 1" in bad.output


def test_progress_shows_the_simulated_day_on_a_terminal_only(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import io

    from slurmscale.cli_simulate import Progress

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    jobs = [TraceJob("a", 0.0, 86400.0 * 2, 8, 1)]
    shown = Progress(jobs, enabled=True)
    shown.policy("slurmscale")(86400.0 * 1.5)
    shown.end()
    assert "simulating slurmscale: day 1.5 of 2.0" in err.getvalue()
    assert err.getvalue().endswith("\r\x1b[K")
