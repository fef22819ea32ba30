"""Capacity Blocks as windows: the pure plan, and the block pass against in-memory Slurm and
EC2 from before a block opens to after it ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from slurmscale.config_file import parse_config
from slurmscale.daemon.executor.edits import REFUSED
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.model import CapacityReservation, QueueJob, SlurmNode
from slurmscale.policy.blocks import (
    FOREVER_S,
    BlockEdit,
    BlockEditKind,
    Closed,
    plan_block,
    starts_at_open,
    windows,
)
from slurmscale.policy.observe import slurm_time
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from slurmscale.store.rows import TimerKind, utc
from tests.support.fakes import FakeCloud, FakeQueue, FakeSlurm
from tests.unit.conftest import base_config
from tests.unit.test_reconcile import Clock, hook

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
S = T0.timestamp() + 3600  # the block opens in an hour
E = S + 4 * 3600  # for four hours
M = 600.0  # margin


def _block(id_: str = "cr-0000000000000b01", start: float = S, end: float = E,
           total: int = 4, free: int | None = None, state: str = "scheduled"
           ) -> CapacityReservation:
    return CapacityReservation(id_, "p5.48xlarge", "us-east-1a", total,
                               total if free is None else free, state, "capacity-block",
                               start, end)


def test_before_the_block_the_pool_is_closed_until_its_start_and_from_its_close() -> None:
    p = plan_block("cb", "slurmscale-block-", [_block()], T0.timestamp(), M)
    assert not p.is_open and (p.closed_from, p.closed_until) == (None, S)
    before, after = p.closed
    assert (before.name, before.start, before.end) == ("slurmscale-block-cb-before", None, S)
    assert (after.name, after.start) == ("slurmscale-block-cb-after", E - M)
    assert after.end >= E - M + FOREVER_S
    assert "waiting for block" in p.reason


def test_during_the_block_the_pool_closes_at_end_less_the_margin_until_further_notice() -> None:
    p = plan_block("cb", "slurmscale-block-", [_block(state="active")], S + 60, M)
    assert p.is_open and p.closed_from == E - M and p.closed_until >= E - M + FOREVER_S
    after = plan_block("cb", "slurmscale-block-", [_block(state="active")], E - M + 1, M)
    assert not after.is_open and after.next is None


def test_touching_blocks_are_two_windows_closed_between_and_gone_ones_do_not_count() -> None:
    """Block B starting as A ends is other capacity: A's instances end with A (issue 45:
    a job that fits only A and B together ran across and was killed at A's end)."""
    b1, b2 = _block("cr-00000000000000a1", S, E), _block("cr-00000000000000a2", E, E + 3600)
    wa, wb = windows([b1, b2, _block("cr-00000000000000a3", state="cancelled")], M)
    assert (wa.blocks, wa.start, wa.close) == (("cr-00000000000000a1",), S, E - M)
    assert (wb.blocks, wb.start, wb.close) == (("cr-00000000000000a2",), E, E + 3600 - M)
    p = plan_block("cb", "x-", [b1, b2], S + 1, M)
    assert (p.closed_from, p.closed_until) == (E - M, E), "closed from A's close to B's start"
    fits_both = dict(starts_at_open(plan_block("cb", "x-", [b1, b2], T0.timestamp(), M),
                                    [("ab", 1, (E - S) + 1800), ("a", 1, 3600)]))
    assert "runs past the window's close" in fits_both["ab"] and "starts when" in fits_both["a"]
    same_hours = _block("cr-00000000000000a5", S, E)  # bought for A's hours: one window
    (w,) = windows([b1, same_hours], M)
    assert w.blocks == ("cr-00000000000000a1", "cr-00000000000000a5")
    later = _block("cr-00000000000000a4", E + 7200, E + 9000)
    p = plan_block("cb", "x-", [b1, later], S + 1, M)
    assert (p.closed_from, p.closed_until) == (E - M, E + 7200), "closed between the blocks"


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20)), max_size=5),
       st.integers(0, 60), st.integers(0, 5))
def test_the_pool_is_open_exactly_inside_a_window(spans: list[tuple[int, int]], t: int,
                                                  margin: int) -> None:
    hour = 3600.0
    blocks = [_block(f"cr-{i:016x}", s * hour, (s + d) * hour, state="active")
              for i, (s, d) in enumerate(spans)]
    now, m = t * hour, margin * hour
    p = plan_block("cb", "x-", blocks, now, m)
    inside = any(s * hour <= now < (s + d) * hour - m for s, d in spans)
    # (blocks whose usable times overlap share a window: inside either counts as inside)
    merged_inside = any(w.start <= now < w.close for w in windows(blocks, m))
    assert p.is_open == merged_inside
    if inside:
        assert p.is_open
    if p.is_open:
        assert p.closed_from is not None and p.closed_from > now
    else:
        assert p.closed_from is None and p.closed_until > now


def test_plan_says_which_pending_gangs_start_when_the_block_opens() -> None:
    p = plan_block("cb", "x-", [_block(total=4)], T0.timestamp(), M)
    said = dict(starts_at_open(p, [("1", 4, 3600.0), ("2", 2, 3600.0),
                                   ("3", 1, 5 * 3600.0)]))
    assert said["1"].startswith("starts when block")
    assert "0 left" in said["2"]
    assert "runs past the window's close" in said["3"]


# --- the pass -------------------------------------------------------------------------------
def _world(tmp_path, ids: list[str] | None = None, queue: FakeQueue | None = None,  # type: ignore[no-untyped-def]
           margin: float = M, **pool: object):
    d = base_config(spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "sock"),
                    hook_log_file=str(tmp_path / "hooks.log"),
                    store_url=f"sqlite:///{tmp_path / 'state.db'}",
                    capacity_blocks={"end_margin_s": margin})
    d["pools"].append({
        "name": "gpu-cb", "partition": "gpu-cb", "node_prefix": "cb-", "max_nodes": 4,
        "instance_types": ["p5.48xlarge"], "capacity_type": "capacity-block",
        "launch_template": {"name": "gpu-cb", "version": 9}, "subnets": ["subnet-1"],
        "capacity_reservations": {"ids": ids or ["cr-0000000000000b01"]}, **pool})
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    for i in range(1, 5):
        slurm.table[f"cb-{i}"] = SlurmNode(f"cb-{i}", "IDLE+CLOUD+POWERED_DOWN", f"cb-{i}",
                                           f"cb-{i}", partitions=("gpu-cb",))
    r = Reconciler(cfg, store, slurm, cloud, clock=clock, queue=queue)
    return r, cloud, slurm, clock, Spool(cfg.spool_dir)


def _set_block(cloud: FakeCloud, now: float, **kw: object) -> None:
    state = "scheduled" if now < S else "active" if now < E else "expired"
    cloud.reservations["cr-0000000000000b01"] = _block(state=state, **kw)  # type: ignore[arg-type]


def test_a_block_pool_from_before_its_start_to_after_its_end(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = _world(tmp_path)
    _set_block(cloud, clock.now.timestamp())
    slurm.now_text = datetime.fromtimestamp(clock.now.timestamp()).isoformat(timespec="seconds")
    r.tick()
    before, after = slurm.resv["slurmscale-block-gpu-cb-before"], \
        slurm.resv["slurmscale-block-gpu-cb-after"]
    assert set(before.nodes) == {"cb-1", "cb-2", "cb-3", "cb-4"} == set(after.nodes)
    assert abs((slurm_time(before.end_time) or 0) - S) < 1
    assert abs((slurm_time(after.start_time) or 0) - (E - M)) < 1, \
        "the close is in Slurm's plan before the block opens"
    r.tick()
    assert sum(1 for c in slurm.calls if c[0] == "create_window_reservation") == 2, \
        "the same windows are not made again"

    # a resume before the start is refused (EC2 would answer insufficient capacity)
    hook(spool, clock, RequestKind.RESUME, {7: ["cb-1", "cb-2"]})
    assert r.tick().failed_gangs == 1 and cloud.launches == []

    # the block opens: "before" has ended (Slurm purges it, untouched by slurmscale),
    # "after" was there all along: no reservation call at all
    clock.now = datetime.fromtimestamp(S + 5, UTC)
    _set_block(cloud, S + 5)
    calls = len(slurm.calls)
    r.tick()
    assert [c for c in slurm.calls[calls:] if "reservation" in c[0]] == []
    del slurm.resv["slurmscale-block-gpu-cb-before"]  # (Slurm's purge at its end)
    (res,) = slurm.resv.values()
    assert abs((slurm_time(res.start_time) or 0) - (E - M)) < 1
    hook(spool, clock, RequestKind.RESUME, {8: ["cb-1", "cb-2"]})
    assert r.tick().launched_gangs == 1
    spec = cloud.launches[-1]["spec"]
    assert spec.capacity_block and spec.launch_template_version == "9"

    # the window closes with job 8 still running: requeued, then the nodes powered down
    for n in ("cb-1", "cb-2"):
        slurm.table[n] = SlurmNode(n, "ALLOCATED+CLOUD", "10.0.0.1", n, partitions=("gpu-cb",))
    slurm.queue = [QueueJob("8", ("gpu-cb",), 2, 8, 3600, "", "", 1, "u", "RUNNING",
                            nodelist="cb-[1-2]")]
    clock.now = datetime.fromtimestamp(E - M + 1, UTC)
    r.tick()
    assert ("requeue", ["8"]) in slurm.calls
    kinds = [e.kind for e in r.store.events()]
    assert kinds.count("block_job_requeued") == 1
    for n in ("cb-1", "cb-2"):
        slurm.table[n] = SlurmNode(n, "IDLE+CLOUD", "10.0.0.1", n, partitions=("gpu-cb",))
    clock.now += timedelta(seconds=10)
    r.tick()
    assert ("power_down", ["cb-1", "cb-2"]) in slurm.calls
    assert "block_closed" in [e.kind for e in r.store.events()]
    # 22.05 shows a queued power-down as POWER_DOWN until its power-save thread begins it
    # (a second or more): the next pass does not ask again (it did, in a CI run)
    for n in ("cb-1", "cb-2"):
        slurm.table[n] = SlurmNode(n, "IDLE+CLOUD+POWER_DOWN", "10.0.0.1", n,
                                   partitions=("gpu-cb",))
    clock.now += timedelta(seconds=1)
    r.tick()
    assert slurm.calls.count(("power_down", ["cb-1", "cb-2"])) == 1
    assert [e.kind for e in r.store.events()].count("block_closed") == 1


def _gang_in_the_block(r, cloud, slurm, clock, spool) -> None:  # type: ignore[no-untyped-def]
    """Job 8, a 2-node gang, launched into the open block and running on cb-[1-2]."""
    clock.now = datetime.fromtimestamp(S + 5, UTC)
    _set_block(cloud, S + 5)
    slurm.now_text = datetime.fromtimestamp(S + 5).isoformat(timespec="seconds")
    r.tick()
    hook(spool, clock, RequestKind.RESUME, {8: ["cb-1", "cb-2"]})
    assert r.tick().launched_gangs == 1
    for n in ("cb-1", "cb-2"):
        slurm.table[n] = SlurmNode(n, "ALLOCATED+CLOUD", "10.0.0.1", n, partitions=("gpu-cb",))
    slurm.queue = [QueueJob("8", ("gpu-cb",), 2, 8, 3600, "", "", 1, "u", "RUNNING",
                            nodelist="cb-[1-2]")]


def test_with_a_grace_signal_a_closing_block_signals_its_gang_and_requeues_before_ec2(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The pool's grace_signal at a block's close (the default margin: EC2's Expiration
    Warning, 40 minutes before the end): the gang still running is signalled once, on both
    its nodes, and requeued at EC2's terminations (30 minutes before the end) less the
    signal's margin; the nodes are powered down by the block pass once idle, not drained."""
    margin = 2400.0
    r, cloud, slurm, clock, spool = _world(tmp_path, margin=margin,
                                           grace_signal={"margin_s": 40})
    _gang_in_the_block(r, cloud, slurm, clock, spool)
    close = E - margin
    requeue_at = E - 1800 - 40
    clock.now = datetime.fromtimestamp(close + 1, UTC)
    r.tick()
    assert [c for c in slurm.calls if c[0] == "signal"] == [("signal", ["8", "USR1", "batch"])]
    assert ("requeue", ["8"]) not in slurm.calls and "drain" not in [c[0] for c in slurm.calls]
    graces = r.store.graces()
    assert sorted(g.node for g in graces) == ["cb-1", "cb-2"]
    assert {utc(g.requeue_at).timestamp() for g in graces} == {requeue_at}
    clock.now = datetime.fromtimestamp(requeue_at - 1, UTC)
    r.tick()
    assert ("requeue", ["8"]) not in slurm.calls, "still in its grace"
    clock.now = datetime.fromtimestamp(requeue_at, UTC)
    r.tick()
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", ["8"])]
    (pre,) = r.store.preemptions("8")
    assert pre.cause == "block-end" and pre.kind == "capacity-block-end:cr-0000000000000b01"
    assert r.store.graces() == [] and "drain" not in [c[0] for c in slurm.calls]
    kinds = [e.kind for e in r.store.events()]
    assert kinds.count("job_signalled") == 1 and kinds.count("job_requeued") == 1
    assert "block_job_requeued" not in kinds
    slurm.queue = []
    for n in ("cb-1", "cb-2"):
        slurm.table[n] = SlurmNode(n, "IDLE+CLOUD", "10.0.0.1", n, partitions=("gpu-cb",))
    clock.now += timedelta(seconds=10)
    r.tick()
    assert ("power_down", ["cb-1", "cb-2"]) in slurm.calls
    assert [c for c in slurm.calls if c[0] in ("requeue", "signal")] == [
        ("signal", ["8", "USR1", "batch"]), ("requeue", ["8"])]


def test_a_close_too_near_ec2s_terminations_for_the_margin_requeues_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A margin below EC2's lead (the close 10 minutes before the end, the terminations 30):
    no time for a grace, the job is requeued at the close as without a grace_signal."""
    r, cloud, slurm, clock, spool = _world(tmp_path, grace_signal={"margin_s": 40})
    _gang_in_the_block(r, cloud, slurm, clock, spool)
    clock.now = datetime.fromtimestamp(E - M + 1, UTC)
    r.tick()
    assert ("requeue", ["8"]) in slurm.calls and "signal" not in [c[0] for c in slurm.calls]
    assert [e.kind for e in r.store.events()].count("block_job_requeued") == 1


def test_blocks_unreadable_change_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.cloud.protocol import CloudError

    r, cloud, slurm, _, _ = _world(tmp_path)
    cloud.down = CloudError("EndpointConnectionError", "no route")
    r.blocks.run(list(slurm.table.values()), T0)
    assert slurm.resv == {} and slurm.calls == []


def test_the_block_partition_starts_down_and_opens_once_slurm_holds_the_window(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """slurm.conf starts a block pool's partition DOWN (jobs queue, none starts): it stays
    down while EC2's blocks or Slurm's reservation edits fail, and is set UP in the pass in
    which Slurm holds the whole plan, once."""
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.slurm.protocol import SlurmError
    from slurmscale.slurmconf import render_slurm_conf

    r, cloud, slurm, clock, _ = _world(tmp_path)
    conf = render_slurm_conf(r.cfg).splitlines()
    assert any(ln.startswith("PartitionName=gpu-cb Nodes=cb-[1-4] State=DOWN ") for ln in conf)
    assert any(ln.startswith("PartitionName=gpu-spot Nodes=") and " State=UP " in ln
               for ln in conf)
    slurm.partitions["gpu-cb"] = "DOWN"
    cloud.down = CloudError("EndpointConnectionError", "no route")
    r.blocks.run(list(slurm.table.values()), clock.now)
    assert slurm.partitions["gpu-cb"] == "DOWN", "closed while the blocks are unknown"
    cloud.down = None
    _set_block(cloud, clock.now.timestamp())

    def refuse(*a: object, **k: object) -> None:
        raise SlurmError(["scontrol"], 1, "Requested nodes are busy")
    real, slurm.create_window_reservation = slurm.create_window_reservation, refuse  # type: ignore[method-assign]
    r.blocks.run(list(slurm.table.values()), clock.now)
    assert slurm.partitions["gpu-cb"] == "DOWN", "closed while Slurm lacks the window"
    slurm.create_window_reservation = real  # type: ignore[method-assign]
    r.store.end_timers(REFUSED, r.store.timers(REFUSED))  # (the refusal's wait over)
    r.blocks.run(list(slurm.table.values()), clock.now)
    assert set(slurm.resv) == {"slurmscale-block-gpu-cb-before", "slurmscale-block-gpu-cb-after"}
    assert slurm.partitions["gpu-cb"] == "UP", "opened once the window is Slurm's"
    assert [e.message for e in r.store.events() if e.kind == "block_partition_opened"] == [
        "gpu-cb: UP, the block's windows being in Slurm's reservations (slurm.conf starts it "
        "DOWN)"]
    r.blocks.run(list(slurm.table.values()), clock.now)
    assert sum(1 for c in slurm.calls if c[0] == "set_partition_state") == 1


def test_a_block_bought_later_moves_the_close_in_place(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Never delete-then-create: in between, Slurm's scheduler sees the pool open (a job
    that outlasted a block was started in such a gap on a real Slurm)."""
    r, cloud, slurm, clock, _ = _world(tmp_path, ids=["cr-0000000000000b01",
                                                       "cr-0000000000000b02"])
    slurm.now_text = datetime.fromtimestamp(clock.now.timestamp()).isoformat(timespec="seconds")
    clock.now = datetime.fromtimestamp(S + 5, UTC)
    _set_block(cloud, S + 5)
    r.tick()
    (after,) = slurm.resv.values()
    later = _block("cr-0000000000000b02", E + 3600, E + 7200, state="scheduled")
    cloud.reservations[later.id] = later  # bought later: EC2 knows it from now on
    clock.now += timedelta(seconds=60)
    calls = len(slurm.calls)
    r.tick()
    ops = [c[0] for c in slurm.calls[calls:] if "reservation" in c[0]]
    assert ops == ["update_window_reservation", "create_window_reservation"], ops
    moved = slurm.resv[after.name]
    assert abs((slurm_time(moved.end_time) or 0) - (E + 3600)) < 1
    # and the new block's own close is in Slurm's plan already, long before it opens
    nxt = slurm.resv["slurmscale-block-gpu-cb-after-2"]
    assert abs((slurm_time(nxt.start_time) or 0) - (E + 7200 - M)) < 1


# --- every window, not the first: the plan against Slurm's own rules -----------------------
class SlurmWindows:
    """What slurmctld does with window reservations over one set of nodes (seen on 22.05
    through 26.05): two may not overlap, one that has begun keeps its start, one past its
    end is purged. Refusals are counted, not raised."""

    def __init__(self) -> None:
        self.resv: dict[str, tuple[float, float]] = {}
        self.refused: list[tuple[BlockEdit, str]] = []

    def held(self, now: float) -> list[Closed]:
        self.resv = {n: (s, e) for n, (s, e) in self.resv.items() if e > now}
        return [Closed(n, s, e) for n, (s, e) in self.resv.items()]

    def apply(self, e: BlockEdit, now: float) -> None:
        if e.kind is BlockEditKind.DELETE:
            self.resv.pop(e.name)
            return
        if e.kind is BlockEditKind.CREATE:
            span = (now if e.start is None else e.start, e.end)
        else:
            start, _ = self.resv[e.name]
            if e.start is not None and start <= now:
                self.refused.append((e, "Reservation already started"))
                return
            span = (start if e.start is None else e.start, e.end)
        if any(max(span[0], s) < min(span[1], end)
               for n, (s, end) in self.resv.items() if n != e.name):
            self.refused.append((e, "overlaps another reservation"))
            return
        self.resv[e.name] = span

    def closed_at(self, t: float) -> bool:
        return any(s <= t < e for s, e in self.resv.values())


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8), st.integers(0, 30)),
                min_size=1, max_size=5),
       st.lists(st.integers(0, 50 * 6), min_size=1, max_size=25), st.integers(0, 3))
def test_every_window_opens_and_closes_as_planned_whatever_the_passes(
        spans: list[tuple[int, int, int]], ticks: list[int], margin: int) -> None:
    """Random blocks (start and length in hours, and the hour the site bought each: EC2 lists
    it from then on), passes at random 10-minute marks: after every pass Slurm holds exactly
    the closed spans ahead (so no job can start that would run past the next close), it
    refused no edit, and a second pass at the same moment changes nothing."""
    hour = 3600.0
    blocks = [(_block(f"cr-{i:016x}", s * hour, (s + d) * hour, state="active"), b * hour)
              for i, (s, d, b) in enumerate(spans)]
    m = margin * hour / 2
    slurm = SlurmWindows()
    for tick in sorted(set(ticks)):
        now = tick * 600.0
        known = [b for b, bought in blocks if bought <= now]
        p = plan_block("cb", "x-", known, now, m, slurm.held(now))
        for e in p.edits:
            slurm.apply(e, now)
        assert slurm.refused == [], slurm.refused
        ws = [w for w in windows(known, m) if w.close > now]
        probes = {now} | {t for w in ws for t in (w.start - 1, w.start, w.close - 1, w.close,
                                                  w.end + hour)}
        for t in sorted(x for x in probes if x >= now):
            inside = any(w.start <= t < w.close for w in ws)
            assert slurm.closed_at(t) != inside, (t, inside, slurm.resv, ws)
        again = plan_block("cb", "x-", known, now, m, slurm.held(now))
        assert again.edits == (), again.edits


def test_an_expiration_warning_closes_the_block_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """EC2 sends the Expiration Warning 40 minutes before a block's end. When the block as
    last read ends later than that (a late config, a skewed clock), the warning's time wins:
    the window closes now, what runs is requeued, before EC2's terminations begin."""
    from slurmscale.cloud.eventbridge import EventKind
    from tests.support.eventbridge_messages import block_message

    queue = FakeQueue()
    r, cloud, slurm, clock, _ = _world(tmp_path, queue=queue)
    clock.now = datetime.fromtimestamp(S + 600, UTC)
    _set_block(cloud, S + 600)
    slurm.now_text = datetime.fromtimestamp(S + 600).isoformat(timespec="seconds")
    r.tick()
    assert "slurmscale-block-gpu-cb-after" in slurm.resv and slurm.calls
    slurm.table["cb-1"] = SlurmNode("cb-1", "ALLOCATED+CLOUD", "10.0.0.1", "cb-1",
                                    partitions=("gpu-cb",))
    slurm.queue = [QueueJob("9", ("gpu-cb",), 1, 8, 3600, "", "", 1, "u", "RUNNING",
                            nodelist="cb-1")]
    r.tick()
    assert ("requeue", ["9"]) not in slurm.calls, "EC2's date: the window is open"
    # the warning says the block ends 40 minutes from now, not at E (hours away)
    warned = clock.now + timedelta(seconds=5)
    clock.now = warned
    queue.bodies.append(block_message(EventKind.BLOCK_EXPIRING, "cr-0000000000000b01",
                                      warned.strftime("%Y-%m-%dT%H:%M:%SZ"), ""))
    r.tick()
    assert ("requeue", ["9"]) in slurm.calls
    kinds = [e.kind for e in r.store.events()]
    assert "block_expiring" in kinds and "block_job_requeued" in kinds
    assert queue.deleted == ["0"]
    # the message is gone from the queue: a standby taking over knows the close from the
    # store, not from a memory that died with the leader
    from slurmscale.config import BLOCK_WARNING_LEAD_S
    lead = min(BLOCK_WARNING_LEAD_S, r.cfg.block_end_margin_s())
    close = min(int(warned.timestamp()) + lead, E)
    standby = Reconciler(r.cfg, r.store, slurm, cloud, clock=clock, queue=FakeQueue())
    (seen,) = standby.reserved.of_pool(r.cfg.pool("gpu-cb"), clock.now.timestamp())
    assert seen.end == close < E
    # over with its block: gone from EC2's answer, its close is forgotten
    del cloud.reservations["cr-0000000000000b01"]
    standby.reserved.changed()
    assert standby.reserved.of_pool(r.cfg.pool("gpu-cb"), clock.now.timestamp()) == []
    assert r.store.timers(TimerKind.BLOCK_WARNED) == {}


def test_status_shows_each_blocks_window_and_the_time_to_its_start_or_end() -> None:
    from slurmscale.cli_status import _window

    p = {"kind": "capacity-block", "start": "2026-11-29T13:00:00+00:00",
         "end": "2026-11-29T17:00:00+00:00"}
    assert _window(p, T0.timestamp()) == "11-29 13:00-17:00 opens in 1h00m"
    assert _window(p, S + 600) == "11-29 13:00-17:00 3h50m left"
    assert _window(p, E + 1) == "11-29 13:00-17:00 over"
    assert _window({**p, "kind": "default"}, S) == "-"


def test_an_extended_block_moves_its_close_in_place_and_the_plan_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """PurchaseCapacityBlockExtension moves a running block's end; DescribeCapacityReservations
    then says so, and the close reservation (not begun yet) moves with it in place."""
    r, cloud, slurm, clock, _ = _world(tmp_path)
    slurm.now_text = datetime.fromtimestamp(S + 60).isoformat(timespec="seconds")
    clock.now = datetime.fromtimestamp(S + 60, UTC)
    _set_block(cloud, S + 60)
    r.tick()
    (after,) = slurm.resv.values()
    assert abs((slurm_time(after.start_time) or 0) - (E - M)) < 1
    cloud.reservations["cr-0000000000000b01"] = _block(end=E + 2 * 3600, state="active")
    clock.now += timedelta(seconds=60)  # (past the reservations' 30 s read)
    calls = len(slurm.calls)
    r.tick()
    ops = [c[0] for c in slurm.calls[calls:] if "reservation" in c[0]]
    assert ops == ["update_window_reservation"], ops
    moved = slurm.resv[after.name]
    assert abs((slurm_time(moved.start_time) or 0) - (E + 2 * 3600 - M)) < 1
    said = [e.message for e in r.store.events() if e.kind == "block_reservation"]
    assert "open until" in said[-1] and "nodes closed from" in said[-1], said


def test_a_resume_as_the_block_opens_waits_for_ec2_to_report_it_active(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Slurm's resume comes the moment the block opens; the reservations were read a moment
    before (EC2 still said `scheduled`), or EC2 turns the block active a little late. Refusing
    would power the nodes down and lose the block's first minutes (seen in CI: a job of a
    compressed-clock scenario never ran in its block): the launch is deferred, the blocks
    read again, a pass soon, and the gang launched once EC2 says active."""
    r, cloud, _slurm, clock, spool = _world(tmp_path)
    clock.now = datetime.fromtimestamp(S - 1, UTC)
    _set_block(cloud, S - 1)
    r.tick()  # (the read: scheduled)
    clock.now = datetime.fromtimestamp(S + 0.5, UTC)
    hook(spool, clock, RequestKind.RESUME, {7: ["cb-1", "cb-2"]})
    res = r.tick()
    assert res.failed_gangs == 0 and cloud.launches == [], "deferred, not refused"
    assert res.next_due is not None and res.next_due - (S + 0.5) <= 2.0
    (said,) = [e.message for e in r.store.events() if e.kind == "launch_deferred"]
    assert "cr-0000000000000b01 was due to start at" in said and "scheduled" in said
    clock.now = datetime.fromtimestamp(S + 3, UTC)
    _set_block(cloud, S + 3)
    assert r.tick().launched_gangs == 1
    assert cloud.launches[-1]["spec"].reservation_ids == ("cr-0000000000000b01",)


def test_the_default_close_is_no_later_than_ec2s_expiration_warning() -> None:
    """EC2 warns 40 minutes before a block's end and the daemon closes the block on the
    warning: the default close is there too (it was 37 minutes: lead + SuspendTimeout + 300
    s), so Slurm plans against the close that happens. A longer SuspendTimeout still counts."""
    from slurmscale.config import BLOCK_WARNING_LEAD_S

    cfg = parse_config(base_config())
    assert cfg.block_end_margin_s() == BLOCK_WARNING_LEAD_S == 2400.0
    slow = base_config()
    slow["power_saving"] = {"suspend_timeout": 600}
    assert parse_config(slow).block_end_margin_s() == 1800 + 600 + 300


def test_a_standby_waits_out_the_refusal_the_leader_was_waiting_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Slurm refused the leader's window; the leader is gone. The refusal is on the store:
    the standby (a new Reconciler on the same store) does not send the same edit again
    before RETRY_REFUSED_S, and sends it once that wait is over."""
    from datetime import timedelta

    from slurmscale.daemon.executor.edits import RETRY_REFUSED_S
    from slurmscale.slurm.protocol import SlurmError

    r, cloud, slurm, clock, _ = _world(tmp_path)
    _set_block(cloud, clock.now.timestamp())
    tries: list[str] = []

    def refuse(name: str, *a: object, **k: object) -> None:
        tries.append(name)
        raise SlurmError(["scontrol"], 1, "Requested nodes are busy")
    real, slurm.create_window_reservation = slurm.create_window_reservation, refuse  # type: ignore[method-assign]
    r.blocks.run(list(slurm.table.values()), clock.now)
    first = len(tries)
    assert first and r.store.timers(REFUSED)
    standby = Reconciler(r.cfg, r.store, slurm, cloud, clock=clock)
    clock.now += timedelta(seconds=RETRY_REFUSED_S - 1)
    _set_block(cloud, clock.now.timestamp())
    standby.blocks.run(list(slurm.table.values()), clock.now)
    assert len(tries) == first, "sent again before the leader's wait was over"
    slurm.create_window_reservation = real  # type: ignore[method-assign]
    clock.now += timedelta(seconds=1)
    standby.blocks.run(list(slurm.table.values()), clock.now)
    assert "slurmscale-block-gpu-cb-before" in slurm.resv
    assert r.store.timers(REFUSED) == {}
