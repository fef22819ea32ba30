"""Paid capacity in reports and status: node-hours paid, used and idle, worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from slurmscale.cli_status import render
from slurmscale.report.compute import paid_now, paid_usage
from slurmscale.store.repo import Store
from slurmscale.store.rows import CapacityReservationRow, InstanceRow
from tests.support.history import seed

T0 = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)


def _row(kind: str = "capacity-block", start: datetime | None = T0,
         end: datetime | None = T0 + timedelta(hours=10), id_: str = "cr-0000000000000b01"
         ) -> CapacityReservationRow:
    return CapacityReservationRow(id=id_, pool="gpu-cb", kind=kind,
                                  instance_type="p5.48xlarge", availability_zone="us-east-1a",
                                  total=4, available=1, state="active", start_at=start,
                                  end_at=end, read_at=T0)


def _inst(i: int, on: float, off: float | None, cr: str = "cr-0000000000000b01"
          ) -> InstanceRow:
    return InstanceRow(instance_id=f"i-{i}", node=f"cb-{i}", pool="gpu-cb", gang_id="g",
                       instance_type="p5.48xlarge", lifecycle="capacity-block",
                       launch_template_version="2", state="running" if off is None
                       else "terminated", capacity_reservation_id=cr,
                       launched_at=T0 + timedelta(hours=on),
                       terminated_at=None if off is None else T0 + timedelta(hours=off))


def test_a_blocks_paid_used_and_idle_node_hours() -> None:
    # 4 nodes x 10 h paid; instances ran 2 h, 3 h, and 1 h of a launch that began before the
    # report's window (from hour 2): within hours 2..10 that is 2 + 3 + 0 + ... by hand below
    insts = [_inst(1, 1, 3), _inst(2, 4, 7), _inst(3, 9, None)]
    u = paid_usage(_row(), insts, T0 + timedelta(hours=2), T0 + timedelta(hours=12))
    # window inside the block: hours 2..10 -> paid 4 x 8 = 32; used: i-1 2..3 = 1, i-2 3,
    # i-3 9..10 = 1 -> 5; idle 27
    assert (u.paid_node_hours, u.used_node_hours, u.idle_node_hours) == (32.0, 5.0, 27.0)
    assert u.utilization == round(5 / 32, 3)
    before = paid_usage(_row(start=T0 + timedelta(days=1), end=T0 + timedelta(days=2)), [],
                        T0, T0 + timedelta(hours=5))
    assert before.paid_node_hours == 0 and before.utilization is None


def test_an_odcr_is_paid_over_the_whole_period_and_status_shows_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.upgrade()
    odcr_id = "cr-00000000000000d1"
    store.save_capacity_reservations([_row("default", T0 - timedelta(days=30), None, odcr_id),
                                      _row()])
    seed(store, [_inst(1, 20, 22, odcr_id), _inst(2, 1, 3), _inst(3, 8, None)])
    now = T0 + timedelta(hours=24)
    (odcr, period), (block, bperiod) = paid_now(store, now)  # by pool, then start
    store.close()
    assert (odcr.kind, period, odcr.paid_node_hours) == ("default", "last 24h", 96.0)
    assert bperiod == "since its start" and block.paid_node_hours == 40.0  # its 10 h, ended
    # ODCR: i-1 ran hours 20..22 of the last 24 h; block: i-2 2 h, i-3 hours 8..10 (its end)
    assert odcr.used_node_hours == 2.0 and block.used_node_hours == 4.0
    text = render({"cluster": "c", "daemon": {"reachable": True, "role": "leader",
                                              "last_tick": None},
                   "pools": [], "reservations": [], "backoff": [], "pending_requests": [],
                   "recent_errors": [], "slurm_error": None,
                   "paid_capacity": [{**odcr.model_dump(), "period": period},
                                     {**block.model_dump(), "period": bperiod},
                                     {**odcr.model_dump(), "kind": "interruptible",
                                      "period": period}]})
    assert "paid capacity" in text and "odcr" in text and "block" in text
    assert " intr " in text  # (docs/capacity.md: an interruptible one was shown as odcr)
    assert max(len(line) for line in text.splitlines()) <= 80, text
