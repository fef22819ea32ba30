"""Where each pending gang stands in Slurm's queue, from `squeue`, `sprio` and the age weights
(pure: the caller reads Slurm).

A gang starves where jobs submitted after it keep ranking above it: small jobs with more
fair-share, a partition or QOS that weighs more. All pending jobs age at the same rate, so age
never reorders jobs already queued; what it does is raise the gang above the jobs still to
come. Once the gang's age factor exceeds the non-age part of every job that overtook it (the
best a new job brings), no newcomer overtakes it again and backfill's plan for it stops
slipping: that moment is its age lift. Age carries at most PriorityWeightAge, reached after
PriorityMaxAge, so a gang behind jobs whose non-age priority is larger than that is never
lifted by age alone.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter, itemgetter
from typing import NamedTuple

from slurmscale.model import JobPriority, PriorityWeights, QueueJob
from slurmscale.policy.observe import slurm_time
from slurmscale.policy.reservations import GangJob


class GangStanding(NamedTuple):
    """(A tuple: 10,000 of them are made, and `plan --live` hands them across a pipe.)"""

    job_id: str
    pool: str
    partition: str
    nodes: int
    waited_s: float
    priority: float
    ahead: int  # pending jobs in its partition that Slurm ranks above it
    overtaken_by: int  # of those, submitted after it
    factors: JobPriority | None  # sprio's line for it (None: sprio does not list it)
    expected_start_s: float | None  # backfill's plan (squeue StartTime)
    lift_s: float | None  # when its age factor alone ranks it above them (None: never)
    lift_note: str


def _lift(g_prio: float, g_age: float, n_over: int, over_excess: float,
          w: PriorityWeights | None, now: float) -> tuple[float | None, str]:
    """When age alone ranks a gang (priority `g_prio`, of which `g_age` is age) above a new job
    like each of the `n_over` that overtook it (the largest non-age priority among them:
    `over_excess`), and why in words."""
    if not n_over:
        return now, "no job submitted after it ranks above it"
    need = over_excess - (g_prio - g_age)  # age factor to reach
    if w is None or w.age <= 0:
        return None, "age carries no weight here (priority/basic or PriorityWeightAge=0)"
    if need > w.age:
        return None, (f"age alone cannot lift it: the {n_over} job(s) that overtook "
                      f"it bring {need:.0f} more priority than its age factor can reach "
                      f"({w.age:.0f}, PriorityWeightAge)")
    if need <= g_age:
        return now, (f"its age factor ({g_age:.0f}) already ranks it above new jobs like the "
                     f"{n_over} that overtook it")
    at = now + (need - g_age) / w.age * w.max_age_s
    return at, (f"its age factor reaches {need:.0f} in {at - now:.0f}s: then no new job like "
                f"the {n_over} that overtook it ranks above it")


def gang_standings(gangs: tuple[GangJob, ...], partition_of: dict[str, str],
                   jobs: list[QueueJob], prios: list[JobPriority],
                   weights: PriorityWeights | None, now: float) -> tuple[GangStanding, ...]:
    """The standing of each pending gang in `gangs` (`partition_of`: pool -> partition)."""
    todo = [g for g in gangs if g.pending and g.pool in partition_of]
    if not todo:
        return ()
    # (50,000 lines: keyed in C, (job_id, partition) being each line's first two fields)
    line = dict(zip(map(itemgetter(0, 1), prios), prios, strict=True))
    wanted = {partition_of[g.pool] for g in todo}
    # per partition: (priority, age, submit) of every pending job (50,000 of them: fields
    # taken in C, sprio's line looked up)
    queue: dict[str, list[tuple[float, float, float]]] = {p: [] for p in wanted}
    get = line.get
    for job_id, parts, submit, prio, state in map(_FIELDS, jobs):
        if state != "PENDING":
            continue
        for part in parts:
            if part in wanted:
                f = get((job_id, part))
                t = slurm_time(submit) or now
                queue[part].append((f[2], f[3], t) if f is not None
                                   else (float(prio), 0.0, t))
    out: dict[tuple[str, str], GangStanding] = {}
    for part in wanted:
        mine = [g for g in todo if partition_of[g.pool] == part]
        out.update(_standings_in(part, mine, queue[part], line, weights, now))
    return tuple(out[g.job_id, g.pool] for g in todo)


_FIELDS = attrgetter("job_id", "partitions", "submit_time", "priority", "state")


def _standings_in(part: str, gangs: list[GangJob], queue: list[tuple[float, float, float]],
                  line: dict[tuple[str, str], JobPriority], weights: PriorityWeights | None,
                  now: float) -> dict[tuple[str, str], GangStanding]:
    """The standings of one partition's gangs in one sweep (a queue of 50,000 jobs and 10,000
    gangs took minutes as a scan per gang): gangs from the highest priority down, each
    admitting the jobs ranked strictly above it into two Fenwick trees over submit-time
    rank - how many were submitted after a time, and the largest non-age priority among
    them - so each gang's `ahead`, `overtaken_by` and lift cost O(log n)."""
    queue.sort(key=itemgetter(0), reverse=True)  # (stable, as a sort by -priority)
    submits = sorted(x[2] for x in queue)
    n = len(submits)
    count = [0] * (n + 1)  # over reversed ranks: a suffix of submit times is a prefix here
    excess = [float("-inf")] * (n + 1)
    admitted = 0
    out: dict[tuple[str, str], GangStanding] = {}
    ranked = []  # (priority, sprio's line or None, gang), the same rule as the queue's
    for g in gangs:
        f = line.get((g.job_id, part))
        ranked.append((f.priority if f else float(g.priority), f, g))
    ranked.sort(key=itemgetter(0), reverse=True)
    for prio, f, g in ranked:
        age = f.age if f else 0.0
        while admitted < n and queue[admitted][0] > prio:
            p, a, submit = queue[admitted]
            i = n - bisect_right(submits, submit) + 1  # reversed rank, 1-based
            x = p - a
            while i <= n:
                count[i] += 1
                if x > excess[i]:
                    excess[i] = x
                i += i & -i
            admitted += 1
        # jobs submitted strictly after the gang: reversed ranks 1 .. n - bisect_right(...)
        i, n_over, over_excess = n - bisect_right(submits, g.submit_s), 0, float("-inf")
        while i > 0:
            n_over += count[i]
            if excess[i] > over_excess:
                over_excess = excess[i]
            i -= i & -i
        lift, note = _lift(prio, age, n_over, over_excess, weights, now)
        out[g.job_id, g.pool] = GangStanding(g.job_id, g.pool, part, g.nodes,
                                             now - g.submit_s, prio, admitted, n_over, f,
                                             g.expected_start_s, lift, note)
    return out
