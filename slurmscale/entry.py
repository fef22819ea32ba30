"""The `slurmscale` command's entry point: `plan --json` straight from the daemon, the rest
through the CLI.

`slurmscale plan --json` is what monitoring and scripts poll, and the running daemon has the
answer already (its last pass's plan). The CLI's imports alone (click, pydantic, SQLAlchemy)
cost about half a second before any work, so this path asks the daemon's socket without
them: it reads just `socket_path` from the config and hands the daemon's JSON through. Any
doubt - other arguments, a config it does not read plainly, no daemon, an error reply - goes
to the full CLI, which validates the config and says what is wrong, and plans itself when
the daemon has no plan to give.

Stdlib (and yaml) only.
"""

from __future__ import annotations

import os
import sys

from slurmscale.api_client import PLAN_TIMEOUT_S, ApiError, request
from slurmscale.hookview import DEFAULT_SOCKET_PATH, MAX_CONFIG_BYTES, resolve_path

STR = "tag:yaml.org,2002:str"


def _split_config(argv: list[str]) -> tuple[str | None, list[str]]:
    if argv[:1] == ["--config"] and len(argv) >= 2:
        return argv[1], argv[2:]
    if argv[:1] and argv[0].startswith("--config="):
        return argv[0].split("=", 1)[1], argv[1:]
    return None, argv


def socket_of(config: str | None) -> str | None:
    """The config's socket_path, or None: leave it to the full CLI. The config is held to
    load_config's rules on what it reads (size, not group/world-writable), and only composed,
    never constructed: an alias is a reference to a node there, not a copy, so no document
    can make this expand (anchors in a config are common; the full loader bounds them)."""
    path = resolve_path(config)
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_CONFIG_BYTES or mode & 0o022:
        return None
    import yaml

    try:
        root = yaml.compose(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, ValueError, RecursionError):
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    found = [v for k, v in root.value if isinstance(k, yaml.ScalarNode)
             and k.tag == STR and k.value == "socket_path"]
    if not found:
        return DEFAULT_SOCKET_PATH
    v = found[-1]
    return v.value if isinstance(v, yaml.ScalarNode) and v.tag == STR and v.value else None


def daemon_plan(argv: list[str]) -> bool:
    """`[--config PATH] plan --json` answered by the daemon: True once printed."""
    config, rest = _split_config(argv)
    if rest != ["plan", "--json"]:
        return False
    sock = socket_of(config)
    if sock is None:
        return False
    try:
        status, body = request(sock, "GET", "/v1/plan", timeout=PLAN_TIMEOUT_S)
    except ApiError:
        return False
    if status != 200 or not body.startswith(b"{"):
        return False
    if sys.stdout.isatty():  # indented for a person, as the CLI prints it
        import json

        body = json.dumps(json.loads(body), indent=2).encode()
    sys.stdout.buffer.write(body + b"\n")
    sys.stdout.flush()
    return True


def main() -> None:
    if daemon_plan(sys.argv[1:]):
        return
    from slurmscale.cli import main as cli_main

    cli_main()
