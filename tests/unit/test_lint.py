"""Lint in CI: `ruff check` over the package and its tests (the rules in pyproject.toml), so a
change that breaks them fails the README's test command, not a later review."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing() -> None:
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "slurmscale",
                          "tests"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
