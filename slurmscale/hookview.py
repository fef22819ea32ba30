"""The hooks' compiled view of the config: the little a hook call needs, kept fresh by hash.

slurmctld runs a hook for every power-up and power-down, gangs of them at once, and waits
on it. Validating the whole config with pydantic and yaml costs a hook ~250 ms of imports
for the five things it uses: which node names the pools own (prefix and size), the spool
directory, the daemon's socket, the hook log, and whether the store URL carries a password
(a world-readable config must then be refused). A hook that had to validate the whole config
writes those into a small JSON view, stamped with the SHA-256 of the config's bytes, the
view's format and slurmscale's version. The next hook reads the config's bytes (it must:
they are the only proof the view is current), hashes them, and uses the view only when all
three stamps match and the file's mode is still acceptable; anything else - a missing,
garbled or foreign view, an edited config, a changed mode, another slurmscale - takes the
slow path, which validates in full and says exactly what is wrong. The view can make a hook
fast, never wrong.

Stdlib only: this module is on the hook's hot path.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from slurmscale import __version__
from slurmscale.hostlists import owns

DEFAULT_CONFIG_PATH = Path("/etc/slurmscale/slurmscale.yaml")
CONFIG_ENV = "SLURMSCALE_CONFIG"
DEFAULT_SPOOL_DIR = "/var/spool/slurmscale"
DEFAULT_SOCKET_PATH = "/run/slurmscale/slurmscale.sock"
# Where the hooks keep the view: hooks.env sets it when spool_dir is not the default.
VIEW_ENV = "SLURMSCALE_HOOK_VIEW"
VIEW_NAME = "hookview.json"
FORMAT = 1
MAX_VIEW_BYTES = 1 << 20
# A config is a page of YAML: a larger file is refused (load_config) and never has a view.
MAX_CONFIG_BYTES = 1 << 20


def resolve_path(path: str | Path | None) -> Path:
    """The config file a command or hook reads: given, else $SLURMSCALE_CONFIG, else /etc."""
    if path:
        return Path(path)
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else DEFAULT_CONFIG_PATH


def view_path() -> Path:
    env = os.environ.get(VIEW_ENV)
    return Path(env) if env else Path(DEFAULT_SPOOL_DIR) / VIEW_NAME


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HookView(NamedTuple):
    """(A NamedTuple: importing dataclasses costs a hook ~15 ms.)"""

    config_path: str
    config_sha256: str
    spool_dir: str
    socket_path: str
    hook_log_file: str
    # (node_prefix, max_nodes) per pool: what Pool.owns decides a node name by
    pools: tuple[tuple[str, int], ...]
    store_url_has_secret: bool
    format: int = FORMAT
    version: str = __version__

    def pool_of(self, node: str) -> str | None:
        """The owning pool's node prefix, or None: the same rule as Config.pool_of."""
        return next((prefix for prefix, size in self.pools if owns(prefix, size, node)), None)

    def to_json(self) -> str:
        return json.dumps(self._asdict(), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> HookView:
        """A view file's content, every field checked (ValueError otherwise): the file sits
        in a directory SlurmUser writes, and a garbled one must only cost speed."""
        d: Any = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        strs = ("config_path", "config_sha256", "spool_dir", "socket_path", "hook_log_file",
                "version")
        if not all(isinstance(d.get(k), str) and d[k] for k in strs):
            raise ValueError("a path or stamp is missing")
        pools = d.get("pools")
        if not (isinstance(pools, list) and pools and all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and p[0]
                and type(p[1]) is int and p[1] >= 1 for p in pools)):
            raise ValueError("bad pools")
        if type(d.get("format")) is not int or type(d.get("store_url_has_secret")) is not bool:
            raise ValueError("bad format or store_url_has_secret")
        return HookView(**{k: d[k] for k in strs}, pools=tuple((p, n) for p, n in pools),
                        store_url_has_secret=d["store_url_has_secret"], format=d["format"])


def compile_view(cfg: Any, config_path: Path, config_sha256: str,
                 store_url_has_secret: bool) -> HookView:
    """The view of a validated Config (typed Any: importing Config would import pydantic)."""
    return HookView(
        config_path=str(config_path.absolute()), config_sha256=config_sha256,
        spool_dir=cfg.spool_dir, socket_path=cfg.socket_path,
        hook_log_file=cfg.hook_log_file,
        pools=tuple((p.node_prefix, p.max_nodes) for p in cfg.pools),
        store_url_has_secret=store_url_has_secret)


def write_view(view: HookView, path: Path) -> None:
    """Replace the view at `path` whole (write beside it, rename): a reader sees the old
    view or the new one. Not fsynced: after a crash a lost view is just a slow hook."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(view.to_json())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def fresh_view(config_path: Path, path: Path) -> tuple[HookView | None, str]:
    """The view at `path` if it is current for the config at `config_path`, else None and
    why not (for the hook log: an admin sees why hooks took the slow path)."""
    try:
        raw = path.read_bytes()
        if len(raw) > MAX_VIEW_BYTES:
            return None, f"view {path} is too large"
        view = HookView.from_json(raw.decode("utf-8"))
    except FileNotFoundError:
        return None, f"no view at {path}"
    except (OSError, ValueError, TypeError) as e:  # JSON and UTF-8 errors are ValueErrors
        return None, f"view {path} unreadable ({e})"
    if (view.format, view.version) != (FORMAT, __version__):
        return None, f"view {path} is from another slurmscale ({view.version})"
    if view.config_path != str(config_path.absolute()):
        return None, f"view {path} is of another config ({view.config_path})"
    try:
        with open(config_path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        return None, f"config {config_path}: {e.strerror}"
    if digest(data) != view.config_sha256:
        return None, f"config {config_path} changed since the view was written"
    # the checks load_config makes on the mode, which can change without the bytes changing
    if mode & 0o022 or (mode & 0o004 and view.store_url_has_secret):
        return None, f"config {config_path} mode {mode & 0o777:04o} needs a full check"
    return view, ""
