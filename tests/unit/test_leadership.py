"""Only one daemon acts per cluster: the lease, and the daemon's role around it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmscale.config import Config
from slurmscale.daemon.leadership import FileLease, SoleLease, lease_for, lock_key
from slurmscale.daemon.service import Daemon


def test_a_file_lease_has_one_holder_until_released(tmp_path: Path) -> None:
    a, b = FileLease(tmp_path / "db.leader"), FileLease(tmp_path / "db.leader")
    assert a.hold() and a.hold(), "the holder keeps it"
    assert not b.hold(), "flock: a second daemon stands by"
    assert ":" in b.holder(), "the file names the holder (host:pid)"
    a.release()
    assert b.hold() and not a.hold()
    b.release()


def test_the_lease_follows_the_store(tmp_path: Path) -> None:
    lease = lease_for(f"sqlite:///{tmp_path}/state.db", "c")
    assert isinstance(lease, FileLease) and lease.path == tmp_path / "state.db.leader"
    assert isinstance(lease_for("sqlite:///:memory:", "c"), SoleLease)
    pytest.importorskip("psycopg")
    pg = lease_for("postgresql+psycopg://u:secret@127.0.0.1:1/db", "c")
    assert type(pg).__name__ == "PgAdvisoryLease"
    assert not pg.hold(), "no database: stand by, do not raise"


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_lock_keys_are_signed_64_bit_and_per_cluster(a: str, b: str) -> None:
    assert -(2**63) <= lock_key(a) < 2**63
    assert lock_key(a) == lock_key(a)
    if a != b:
        assert lock_key(a) != lock_key(b)


def test_a_daemon_leads_only_with_the_lease_and_records_taking_over(cfg: Config) -> None:
    assert cfg.store_url.startswith("sqlite:///")
    other = FileLease(Path(cfg.store_url.removeprefix("sqlite:///") + ".leader"))
    assert other.hold()
    d = Daemon(cfg)
    try:
        assert d._lead() is None and d.role == "standby"
        d._tick()
        assert d.last_tick.get("standby") is True
        other.release()
        assert d._lead() is not None and d.role == "leader"
        assert [e.kind for e in d.store.events()] == ["leader_acquired"]
        assert d._lead() is d.reconciler, "the same reconciler while the lease holds"
        assert not other.hold()
    finally:
        d._close()
    assert other.hold(), "a stopped daemon leaves the lease free"
    other.release()
