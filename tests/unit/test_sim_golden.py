"""The simulator's quick golden runs give the committed results (tests/benchmarks/sim_golden.py:
`--all` adds the 14-day traces, one command). A change that means to move a figure updates
tests/data/sim_golden.json in the same commit and says why."""

from __future__ import annotations

import copy

from tests.benchmarks.sim_golden import RUNS, check, load, moved


def test_the_quick_golden_runs_give_the_committed_results() -> None:
    golden = load()
    quick = [n for n, (fast, _) in RUNS.items() if fast]
    assert set(RUNS) <= set(golden), "a run without its committed result: run with --update"
    _, diffs = check(quick, golden)
    assert diffs == {}, "\n".join(f"{n}: {line}" for n, d in diffs.items() for line in d[:20])


def test_the_gate_names_each_figure_that_moved() -> None:
    """The comparison cannot pass what differs: one figure moved deep in a run is named."""
    golden = load()
    run = golden["slice-spot"]
    bent = copy.deepcopy(run)
    bent["policies"]["slurmscale"]["preemptions"] += 1
    bent["policies"]["slurmscale"]["gang_start_order"].reverse()
    assert list(moved(run, run)) == []
    said = list(moved(run, bent))
    assert len(said) == 2 and said[1].startswith("policies.slurmscale.preemptions: ")
    assert said[0].startswith("policies.slurmscale.gang_start_order: [")
    assert list(moved({}, run))  # a run missing from the file moves every figure
