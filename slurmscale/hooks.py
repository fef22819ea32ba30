"""What ResumeProgram, SuspendProgram and ResumeFailProgram run.

slurmctld runs these with only SLURM_CONF (and SLURM_RESUME_FILE) in the environment, stdio
closed, and - from 23.02 - a kill timer; the resume file vanishes about a second after we exit.
So: read the resume file first, validate everything, record the request durably in the spool,
poke the daemon, exit. Never start a long-lived process. Imports stay light: the config comes
from its compiled view (hookview.py) and pydantic, yaml, SQLAlchemy and boto3 are imported
only when that view is stale, so a hook takes a few tens of milliseconds over the
interpreter's own start.

Exit codes: 0 recorded; 2 bad input (nothing recorded); 1 could not record (config, disk).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Protocol

from slurmscale.api_client import poke
from slurmscale.hookview import (
    VIEW_NAME,
    HookView,
    compile_view,
    fresh_view,
    resolve_path,
    view_path,
    write_view,
)
from slurmscale.hostlists import HostlistError, expand
from slurmscale.slurm.resume_file import ResumeFileError, parse_resume_file
from slurmscale.spool import MAX_TEXT, NotSmallFile, RequestKind, Spool, read_small

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(ValueError):
    pass


class NodeOwners(Protocol):
    """What a hook validates node names against: the Config, or its HookView."""

    def pool_of(self, node: str) -> object | None: ...


class HookLog:
    """The hook's log: one line per call, in the daemon's log format, appended to
    hook_log_file and copied to stderr when slurmctld left it open. Not the logging module:
    importing it costs a hook ~15 ms, and one os.write per line to an O_APPEND file keeps
    lines of hooks running at once whole."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def open(self, log_file: str | None) -> None:
        if self.fd is not None:  # run_hook called again in one process (tests)
            os.close(self.fd)
            self.fd = None
        if not log_file:
            return
        try:
            Path(log_file).parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            self.fd = None

    def _line(self, level: str, msg: str) -> None:
        now = time.time()
        line = (f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))},"
                f"{int(now * 1000) % 1000:03d} slurmscale.hook[{os.getpid()}] {level} {msg}\n")
        if self.fd is not None:
            try:
                os.write(self.fd, line.encode("utf-8", "backslashreplace"))
            except OSError:
                pass
        if sys.stderr is not None and not sys.stderr.closed:
            try:
                sys.stderr.write(line)
            except (OSError, ValueError):
                pass

    def info(self, msg: str) -> None:
        self._line("INFO", msg)

    def error(self, msg: str) -> None:
        self._line("ERROR", msg)


log = HookLog()


def _validate_nodes(cfg: NodeOwners, nodes: list[str]) -> None:
    stray = [n for n in nodes if cfg.pool_of(n) is None]
    if stray:
        raise BadInput(f"node {stray[0]!r} is not in any slurmscale pool"
                       + (f" (and {len(stray) - 1} more)" if len(stray) > 1 else ""))


def _read_resume_file() -> str | None:
    path = os.environ.get("SLURM_RESUME_FILE")
    if not path:
        return None
    # Slurm writes a small regular file. Read at most one byte past the limit, and nothing at
    # all from what is not a regular file: a FIFO would block the hook (opened without
    # O_NONBLOCK) and /dev/zero never ends (4 GB in 4 s, read whole).
    try:
        raw = read_small(path, MAX_TEXT)
    except NotSmallFile as e:
        raise BadInput(f"SLURM_RESUME_FILE {path} is {e}") from None
    except OSError as e:
        raise BadInput(f"cannot read SLURM_RESUME_FILE {path}: {e.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"SLURM_RESUME_FILE {path} is not UTF-8 text (byte {e.start})") from None


def build_request(cfg: NodeOwners, kind: RequestKind, argv: list[str],
                  resume_text: str | None) -> tuple[list[str], str | None]:
    """Validate a hook call; returns the node list and the resume file text to record."""
    if len(argv) != 1 or not argv[0].strip():
        raise BadInput(f"expected exactly one hostlist argument, got {argv!r}")
    try:
        nodes = expand(argv[0])
    except HostlistError as e:
        raise BadInput(str(e)) from None
    _validate_nodes(cfg, nodes)
    if kind is RequestKind.RESUME and resume_text is not None:
        try:
            rf = parse_resume_file(resume_text)
        except ResumeFileError as e:
            raise BadInput(str(e)) from None
        _validate_nodes(cfg, list(rf.all_nodes))
        extra = sorted({n for j in rf.jobs for n in j.nodes} - set(nodes))
        if extra:
            raise BadInput(f"resume file names nodes not in the hostlist: {extra}")
    return nodes, resume_text


def _validated_view(config_path: Path, target: Path) -> tuple[HookView, str]:
    """The slow path: validate the whole config (importing pydantic and yaml), compile its
    view and leave it at `target` for the next hook. Raises ConfigError."""
    from slurmscale.config_file import load_config_and_digest, url_secrets

    cfg, sha = load_config_and_digest(config_path)
    view = compile_view(cfg, config_path, sha, bool(url_secrets(cfg.store_url)))
    try:
        write_view(view, target)
    except OSError as e:
        why = f"; view not written to {target} ({e.strerror})"
        beside = Path(cfg.spool_dir) / VIEW_NAME
        if target != beside:  # (the spool is SlurmUser's to write: the view's place)
            why += f": set SLURMSCALE_HOOK_VIEW={beside} in hooks.env"
        return view, why
    return view, ""


def run_hook(kind: RequestKind, argv: list[str], config_path: str | None = None) -> int:
    started = time.monotonic()
    early_error: BadInput | None
    try:
        resume_text = _read_resume_file() if kind is RequestKind.RESUME else None
    except BadInput as e:
        resume_text, early_error = None, e
    else:
        early_error = None
    path, target = resolve_path(config_path), view_path()
    view, stale = fresh_view(path, target)
    how = "config from its view"
    if view is None:
        from slurmscale.config import ConfigError

        try:
            view, unwritten = _validated_view(path, target)
        except ConfigError as e:
            log.error(f"{kind.value} hook: {e}")
            return EXIT_FAILED
        how = f"config validated: {stale}{unwritten}"
    log.open(view.hook_log_file)
    try:
        if early_error is not None:
            raise early_error
        nodes, resume_text = build_request(view, kind, argv, resume_text)
    except BadInput as e:
        log.error(f"{kind.value} hook refused {argv!r}: {e}; nothing recorded ({how})")
        return EXIT_BAD_INPUT
    spool = Spool(view.spool_dir)
    req = spool.new_request(kind, nodes, argv[0], resume_text)
    try:
        spool.put(req)
    except OSError as e:
        log.error(f"{kind.value} hook could not record request for {argv[0]} in "
                  f"{view.spool_dir}: {e} ({how})")
        return EXIT_FAILED
    poked = poke(view.socket_path)
    log.info(f"{kind.value} {argv[0]} recorded as {req.id} in "
             f"{(time.monotonic() - started) * 1000:.0f} ms (daemon "
             f"{'poked' if poked else 'not reachable'}; {how})")
    return EXIT_OK


CHECK = "--check"  # `slurmscale check` and `install` run each hook so, as SlurmUser


def dry_run(config_path: str | None = None) -> int:
    """What a hook needs, tried as its user with nothing written: this interpreter runs and
    imports the hook (the shell wrapper found it), the config validates, the spool can be
    written, the hook log appended. One line on stdout; 0 all can, else 1."""
    from slurmscale.config import ConfigError
    from slurmscale.config_file import load_config

    path = resolve_path(config_path)
    try:
        cfg = load_config(path)
    except ConfigError as e:
        print(f"hook dry run: {e}")
        return EXIT_FAILED
    spool = Path(cfg.spool_dir)
    where = spool if spool.exists() else spool.parent
    if not os.access(where, os.W_OK | os.X_OK):
        print(f"hook dry run: cannot write the spool {where} as uid {os.getuid()}")
        return EXIT_FAILED
    logs = Path(cfg.hook_log_file).parent
    note = ("" if os.access(logs if logs.exists() else logs.parent, os.W_OK | os.X_OK)
            else f"; its log {cfg.hook_log_file} cannot be written: its lines are lost")
    print(f"hook dry run: ok ({sys.executable}, config {path}, spool {spool}{note})")
    return EXIT_OK


def main() -> None:
    kinds = {"resume": RequestKind.RESUME, "suspend": RequestKind.SUSPEND,
             "resume-fail": RequestKind.RESUME_FAIL}
    if len(sys.argv) < 2 or sys.argv[1] not in kinds:
        print(f"usage: python -m slurmscale.hooks {{{'|'.join(kinds)}}} HOSTLIST",
              file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    if sys.argv[2:] == [CHECK]:
        sys.exit(dry_run())
    sys.exit(run_hook(kinds[sys.argv[1]], sys.argv[2:]))


if __name__ == "__main__":
    main()
