"""The edit executor's error policies, one per kind of edit: a refusal said once in the kind's
failure event; a held-off kind (a Capacity Block's window, a reservation's delete, a block
partition set UP) not sent again the same before RETRY_REFUSED_S, its wait on the store."""

from __future__ import annotations

from typing import Any

from slurmscale.audit import Kind
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.edits import REFUSED, RETRY_REFUSED_S, SlurmEdits
from slurmscale.slurm.protocol import SlurmError
from slurmscale.store.memory import MemoryStore


class Slurm:
    """Refuses every call while `refusing`; records the calls it was sent."""

    def __init__(self) -> None:
        self.refusing = True
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: object) -> None:
            self.calls.append(name)
            if self.refusing:
                raise SlurmError(["scontrol", name], 1, "Requested nodes are busy")
        return call


def test_a_held_off_edit_refused_is_said_once_and_not_sent_again_until_its_wait_is_over() -> None:
    slurm, store, said = Slurm(), MemoryStore(), []
    x = SlurmEdits(slurm, lambda kind, msg, **k: said.append((kind, msg)), store)  # type: ignore[arg-type]
    edit = edits.window("b-1", ["cb-1", "cb-2"], ["root"], None, 9_000.0,
                        said=(Kind.BLOCK_RESERVATION, "closed"))
    assert not x.apply(edit, 1_000.0)
    assert said == [(Kind.SLURM_UPDATE_FAILED, "reservation b-1 (create): scontrol "
                     "create_window_reservation exited 1: Requested nodes are busy; not sent "
                     "again the same before 1970-01-01 00:21:40Z")], said
    assert store.timers(REFUSED) == {edit.key: 1_000.0}
    slurm.refusing = False
    assert not x.apply(edit, 1_000.0 + RETRY_REFUSED_S - 1)  # still in its wait: not sent
    assert slurm.calls == ["create_window_reservation"] and len(said) == 1
    # another edit (another end) is not the same: sent at once
    assert x.apply(edits.window("b-1", ["cb-1"], ["root"], None, 9_060.0), 1_001.0)
    assert x.apply(edit, 1_000.0 + RETRY_REFUSED_S)
    assert said[-1] == (Kind.BLOCK_RESERVATION, "closed") and store.timers(REFUSED) == {}


def test_an_edit_of_another_kind_is_sent_each_time_it_is_asked() -> None:
    slurm, said = Slurm(), []
    x = SlurmEdits(slurm, lambda kind, msg, **k: said.append((kind, msg)))  # type: ignore[arg-type]
    for _ in range(2):
        assert not x.apply(edits.drain(["n-1"], "broken"))
    assert slurm.calls == ["drain", "drain"]
    assert [k for k, _ in said] == [Kind.SLURM_UPDATE_FAILED] * 2


def test_each_held_off_kind_names_what_was_refused() -> None:
    slurm, store, said = Slurm(), MemoryStore(), []
    x = SlurmEdits(slurm, lambda kind, msg, **k: said.append(msg), store)  # type: ignore[arg-type]
    x.apply(edits.unreserve("b-old"), 0.0)
    x.apply(edits.partition_up("gpu-cb", ["cb-1"]), 0.0)
    x.apply(edits.window_set("b-1", ["cb-1"], 600.0, 900.0), 0.0)
    assert [m.split(":")[0] for m in said] == [
        "delete reservation b-old", "partition gpu-cb UP", "reservation b-1 (update)"]
    assert len(store.timers(REFUSED)) == 3
