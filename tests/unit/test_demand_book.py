"""A pool's pending demand from the DemandBook's tallies (kept as jobs come and go: the
daemon's queue view) is what walking the pool's pending jobs gives, bit for bit; and a tally
that cannot be exact says so, so that `decide` walks instead."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.daemon.passes.ledger import pools_now
from slurmscale.policy.decide import decide
from slurmscale.policy.demand import (
    DemandBook,
    demand_of,
    pending_nodes,
    pool_demand,
    tally_nodes,
)
from slurmscale.policy.model import Mode, PendingJob, PoolKnobs, Snapshot, gang_order

POOLS = ("a", "b", "c")
# (governed pools step at once under any pending demand: the step's size is the nodes the
# pending jobs need, from the tally or the walk)
KNOBS = {"a": PoolKnobs("a", gpus_per_node=8, max_nodes=16, mode=Mode.GOVERNED,
                        sustained_s=0.0, queue_gpu_hours=0.0),
         "b": PoolKnobs("b", gpus_per_node=0, max_nodes=5, default_time_limit_s=7200.0),
         "c": PoolKnobs("c", gpus_per_node=4, max_nodes=64, default_time_limit_s=1800.5,
                        mode=Mode.GOVERNED, sustained_s=0.0, queue_gpu_hours=0.0)}

pending_job = st.builds(
    PendingJob,
    job_id=st.sampled_from([str(i) for i in range(12)]),
    pool=st.sampled_from(POOLS),
    nodes=st.sampled_from([1, 1, 2, 4, 32]),
    gpus_per_node=st.sampled_from([0, 4, 8]),
    time_limit_s=st.sampled_from([None, 0, 60, 3600, 86400.0, 90.25]),
    submit_s=st.sampled_from([100.0, 200.0, 250.5, 900.0]),
    priority=st.integers(0, 3),
    actionable=st.booleans(),
    also=st.sampled_from([(), ("b",), ("a", "c")]),
    tasks=st.integers(1, 3),
    startable=st.integers(0, 3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(pending_job, st.sampled_from([str(i) for i in range(12)]),
                          st.tuples(st.sampled_from([str(i) for i in range(12)]),
                                    st.integers(0, 3))),
                max_size=40))
def test_a_tally_kept_as_jobs_come_and_go_gives_what_walking_the_jobs_gives(
        steps: list[PendingJob | str | tuple[str, int]]) -> None:
    """Each step a job's demand is made, changed (a job id seen before), given a new
    priority alone (an id and a priority: what each PriorityCalcPeriod does), or gone (an
    id alone). A book made at once from the jobs of that step gives the same."""
    book, jobs = DemandBook(POOLS), {}
    now = 1000.0
    for step in steps:
        if isinstance(step, str):
            book.swap(jobs.pop(step, None), None)
        elif not isinstance(step, PendingJob):
            old = jobs.get(step[0])
            if old is not None:
                jobs[old.job_id] = new = old._replace(priority=step[1])
                book.swap(old, new)
        else:
            book.swap(jobs.get(step.job_id), step)
            jobs[step.job_id] = step
        tallies, near = book.tallies(), book.near()
        # a book made at once from the jobs as they are (a fresh queue view's) is the same
        at_once = DemandBook.of(POOLS, jobs.values())
        assert (at_once.tallies(), at_once.near()) == (tallies, near)
        for p in POOLS:
            k, mine = KNOBS[p], [j for j in jobs.values() if j.pool == p]
            others = [j for j in jobs.values() if p in j.also and j.actionable]
            t = tallies[p]
            assert tally_nodes(k, t) == pending_nodes(k, mine)
            assert t.gangs == tuple(sorted((j for j in mine if j.actionable and j.nodes >= 2),
                                           key=gang_order))  # (each the job as it is now)
            if t.exact(k):
                assert demand_of(k, t, now) == pool_demand(k, mine, now)
            else:  # a limit of a fraction of a second, or such a default where one is missing
                assert any(j.actionable and j.time_limit_s == 90.25 for j in mine) or (
                    p == "c" and any(j.actionable and not j.time_limit_s for j in mine))
            assert (p in near) == bool(others)
            if p in near and t.plus(near[p]).exact(k):
                assert (demand_of(k, t.plus(near[p]), now)
                        == pool_demand(k, mine + others, now))


@settings(max_examples=100, deadline=None)
@given(st.lists(pending_job, max_size=25))
def test_decide_and_the_ledger_read_the_same_from_the_tallies_as_from_the_jobs(
        made: list[PendingJob]) -> None:
    jobs = {j.job_id: j for j in made}
    book = DemandBook(POOLS)
    for j in jobs.values():
        book.swap(None, j)
    walked = Snapshot(now=1000.0, pools=tuple(KNOBS.values()), nodes=(),
                      jobs=tuple(jobs.values()))
    tallied = Snapshot(now=1000.0, pools=tuple(KNOBS.values()), nodes=(),
                       jobs=tuple(jobs.values()), tallies=book.tallies(), near=book.near())
    assert decide(tallied) == decide(walked)
    assert pools_now(tallied) == pools_now(walked)  # (the ledger's samples and metrics)
