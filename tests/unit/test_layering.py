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
    p for d in ("daemon", "policy") for p in (PKG / d).glob("*.py")
    if f"{d}/{p.name}" not in COMPOSITION_ROOT), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_pass_or_decision_imports_an_adapter(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if m.startswith(ADAPTERS))
    assert bad == [], f"{path.relative_to(PKG)} imports {bad}: go through the protocol"


def test_the_rule_sees_the_composition_roots_adapters() -> None:
    """(the rule can fail: the one module allowed to build adapters does import them)"""
    got = _imports(PKG / "daemon" / "service.py")
    assert {"slurmscale.cloud.ec2", "slurmscale.cloud.route53",
            "slurmscale.slurm.cli_backend"} <= got
