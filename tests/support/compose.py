"""docker-compose.slurm.yml's services as compose reads them: `${VAR:-default}` substituted
from an environment (compose's own rule for the forms the file uses)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.slurm.yml"
_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}")


def _sub(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, list):
        return [_sub(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _sub(v, env) for k, v in value.items()}
    return value


def services(env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    return _sub(yaml.safe_load(COMPOSE.read_text())["services"], env or {})
