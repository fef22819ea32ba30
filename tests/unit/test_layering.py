"""The decisions and the passes reach Slurm and EC2 only through their protocols (design:
adapters at the edges). A pass module that imports an adapter (the CLI backend, the boto3
EC2 client, a subprocess) ties a decision to one backend and keeps the simulator from
driving it; only the daemon's composition root (`daemon/service.py`) builds adapters."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "slurmscale"
ADAPTERS = ("slurmscale.cloud.ec2", "slurmscale.cloud.aws", "slurmscale.cloud.sqs",
            "slurmscale.cloud.route53", "slurmscale.slurm.cli_backend", "boto3", "botocore",
            "subprocess")
COMPOSITION_ROOT = {"daemon/service.py"}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("path", sorted(
    p for d in ("daemon", "policy") for p in (PKG / d).rglob("*.py")
    if str(p.relative_to(PKG)) not in COMPOSITION_ROOT), ids=lambda p: str(p.relative_to(PKG)))
def test_no_pass_or_decision_imports_an_adapter(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if m.startswith(ADAPTERS))
    assert bad == [], f"{path.relative_to(PKG)} imports {bad}: go through the protocol"


def test_the_rule_sees_the_composition_roots_adapters() -> None:
    """(the rule can fail: the one module allowed to build adapters does import them)"""
    got = _imports(PKG / "daemon" / "service.py")
    assert {"slurmscale.cloud.ec2", "slurmscale.cloud.route53",
            "slurmscale.slurm.cli_backend"} <= got


# infrastructure the Reconciler wraps the outside in (not passes): built from it, not from
# the context
NOT_PASSES = {"PassTimes", "CallFailures", "NodeWrites", "_Through"}


def test_every_part_of_the_loop_takes_the_pass_context_first() -> None:
    """One constructor style (issue 44): every pass and part of the reconcile loop the
    Reconciler builds is given the one `PassContext` first, then the other parts it works
    with, at construction (none is wired to another afterwards)."""
    import inspect

    from slurmscale.config_file import parse_config
    from slurmscale.daemon.reconcile import Reconciler
    from slurmscale.store.memory import MemoryStore
    from tests.support.fakes import FakeCloud, FakeSlurm
    from tests.unit.conftest import base_config

    d = base_config()
    d["dns"] = {"hosted_zone_id": "Z0123456789ABCDEFGHIJ", "domain": "cluster.internal"}
    d["topology"] = {}
    r = Reconciler(parse_config(d), MemoryStore(), FakeSlurm(), FakeCloud(),
                   dns_zone=object())  # type: ignore[arg-type]
    parts = {k: type(v) for k, v in vars(r).items()
             if type(v).__module__.startswith("slurmscale.daemon.")
             and type(v).__name__ not in NOT_PASSES}
    assert {"capacity", "interruptions", "sweep", "health", "blocks", "keep_up", "names",
            "topology", "reserved", "backoff"} <= parts.keys(), parts
    firsts = {k: next(iter(inspect.signature(t).parameters), None) for k, t in parts.items()}
    assert {k: p for k, p in firsts.items() if p != "ctx"} == {}


# Slurm's writes (the SlurmClient protocol's methods that change Slurm)
SLURM_WRITES = {"set_node_address", "set_node_addresses", "power_down_force", "power_down",
                "power_up", "set_job_partitions", "drain", "undrain", "create_reservation",
                "create_window_reservation", "update_window_reservation",
                "set_reservation_nodes", "delete_reservation", "set_partition_state",
                "set_job_reservation", "requeue", "signal_job", "reconfigure",
                "set_suspend_exc_nodes", "set_node_instances"}
# where they are made: the edit executor, and the effects' (a job's signal)
EXECUTORS = {"edits.py", "effects.py"}


def _writes(path: Path, methods: set[str], owner: str) -> list[str]:
    """`<...>.<owner>.<method>(...)` and `<owner>.<method>(...)` calls in `path`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in methods):
            continue
        o = node.func.value
        name = o.attr if isinstance(o, ast.Attribute) else getattr(o, "id", "")
        if name == owner:
            out.append(f"{node.func.attr} (line {node.lineno})")
    return out


def _slurm_writes(path: Path) -> list[str]:
    return _writes(path, SLURM_WRITES, "slurm")


def test_only_the_executors_write_to_slurm() -> None:
    """Effects as data (issue 44): every write a pass makes to Slurm is an edit applied by
    one executor, with one error policy per kind; no pass calls Slurm's writes itself."""
    found = {str(p.relative_to(PKG)): w for p in sorted((PKG / "daemon").rglob("*.py"))
             if p.name not in EXECUTORS and (w := _slurm_writes(p))}
    assert found == {}


def test_the_write_rule_sees_the_executors_writes() -> None:
    """(the rule can fail: the executor's own calls are found)"""
    got = _slurm_writes(PKG / "daemon" / "executor" / "edits.py")
    assert any(w.startswith("requeue ") for w in got) and len(got) >= 15, got


# EC2's writes (the CloudProvider protocol's methods that change EC2)
EC2_WRITES = {"launch", "tag", "terminate", "ensure_placement_group",
              "delete_placement_group"}


def _ec2_writes(path: Path) -> list[str]:
    return _writes(path, EC2_WRITES, "cloud")


def test_only_the_effects_write_to_ec2() -> None:
    """Effects as data (issue 44): a launch's CreateFleet, a node's tags, a terminate, a
    placement group made or deleted are effects the executor applies, each kind with its
    error policy; no pass calls EC2's writes itself."""
    found = {str(p.relative_to(PKG)): w for p in sorted((PKG / "daemon").rglob("*.py"))
             if p.name != "effects.py" and (w := _ec2_writes(p))}
    assert found == {}


def test_the_ec2_rule_sees_the_executors_writes() -> None:
    """(the rule can fail: the executor's own calls are found)"""
    got = {w.split()[0] for w in _ec2_writes(PKG / "daemon" / "executor" / "effects.py")}
    assert got == EC2_WRITES, got


# the event queue's, Route 53's and Slurm's files' writes
OUTSIDE_WRITES = {"delete": "queue", "change": "zone"}


def _outside_writes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = [w for m, owner in OUTSIDE_WRITES.items() for w in _writes(path, {m}, owner)]
    out += [f"open (line {n.lineno})" for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == "open"]
    return out


def test_only_the_effects_delete_messages_change_dns_or_write_slurms_files() -> None:
    """One result per pass (issue 66): the SQS delete, Route 53's change batch and
    topology.conf's write are effects too (`Forget`, `Names`, `WriteFile`), applied where
    every other write is."""
    found = {str(p.relative_to(PKG)): w for p in sorted((PKG / "daemon").rglob("*.py"))
             if p.name != "effects.py" and (w := _outside_writes(p))}
    assert found == {}


def test_the_outside_rule_sees_the_executors_writes() -> None:
    """(the rule can fail: the executor's own calls are found)"""
    got = {w.split()[0] for w in _outside_writes(PKG / "daemon" / "executor" / "effects.py")}
    assert got == {"delete", "change", "open"}, got
