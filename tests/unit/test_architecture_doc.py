"""docs/architecture.md's layer table names every module of the package, and only modules that
exist: a module added without its row, or a row left behind by a removed one, fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _documented() -> set[str]:
    text = (ROOT / "docs/architecture.md").read_text()
    section = text[text.index("## Layers"):text.index("## Decisions worth knowing")]
    out = set()
    for row in section.splitlines():
        cells = row.split("|")
        if len(cells) < 4 or not (m := re.fullmatch(r"\s*`(slurmscale/[\w/]*)`\s*", cells[2])):
            continue
        out |= {m[1] + name for name in re.findall(r"`(\w+\.py)`", cells[3])}
    return out


def _modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / "slurmscale").rglob("*.py")
            if p.name not in ("__init__.py", "__main__.py") and "migrations" not in p.parts}


def test_the_layer_table_names_every_module_and_no_other() -> None:
    documented, modules = _documented(), _modules()
    assert not modules - documented, f"modules without a row: {sorted(modules - documented)}"
    assert not documented - modules, f"rows naming no module: {sorted(documented - modules)}"
