"""docs/reference.md lists every configuration key (the README's reference moved there): each
leaf of the config's pydantic models appears in backticks, by its dotted path or, inside a
group's row (`pools[]`, `reservations.*`), by its name. A key added to the models without a
line in the reference fails here."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from slurmscale.config import Config

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def _models(annotation: object) -> list[type[BaseModel]]:
    out, stack = [], [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            out.append(a)
        stack += list(typing.get_args(a))
    return out


def leaves(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        inner = [m for m in _models(field.annotation) if m is not model]
        out += leaves(inner[0], (*path, name)) if inner else [(*path, name)]
    return out


def test_every_config_key_is_in_the_reference() -> None:
    text = re.sub(r"```.*?```", "", DOC.read_text(), flags=re.S)
    ticked = {w for t in re.findall(r"`([^`\n]+)`", text) for w in re.split(r"[\s,/|]+", t)}
    keys = leaves(Config)
    assert len(keys) > 100
    missing = [".".join(k) for k in keys if ".".join(k) not in ticked and k[-1] not in ticked]
    assert missing == [], f"not in docs/reference.md: {missing}"


def test_the_readme_starts_with_what_it_is_and_the_two_commands() -> None:
    readme = (DOC.parents[1] / "README.md").read_text().splitlines()
    first_screen = "\n".join(readme[:40])
    assert "sudo scripts/demo.sh" in first_screen and "sudo scripts/test.sh" in first_screen
    assert "docs/reference.md" in "\n".join(readme) and len(readme) < 120
