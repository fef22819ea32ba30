"""What ResumeProgram, SuspendProgram and ResumeFailProgram run.

slurmctld runs these with only SLURM_CONF (and SLURM_RESUME_FILE) in the environment, stdio
closed, and - from 23.02 - a kill timer; the resume file vanishes about a second after we exit.
So: read the resume file first, validate everything, record the request durably in the spool,
poke the daemon, exit. Never start a long-lived process. Imports stay light (no SQLAlchemy, no
boto3) so a hook finishes in well under a second.

Exit codes: 0 recorded; 2 bad input (nothing recorded); 1 could not record (config, disk).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from slurmscale.api_client import poke
from slurmscale.config import Config, ConfigError, load_config
from slurmscale.hostlists import HostlistError, expand
from slurmscale.model import RequestKind
from slurmscale.slurm.resume_file import ResumeFileError, parse_resume_file
from slurmscale.spool import MAX_TEXT, Spool

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

log = logging.getLogger("slurmscale.hook")


class BadInput(ValueError):
    pass


def _setup_logging(cfg: Config | None) -> None:
    path = Path(cfg.hook_log_file) if cfg else None
    handlers: list[logging.Handler] = []
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.FileHandler(path))
        except OSError:
            pass
    if sys.stderr is not None and not sys.stderr.closed:
        handlers.append(logging.StreamHandler(sys.stderr))
    fmt = logging.Formatter("%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    root = logging.getLogger("slurmscale")
    for h in handlers:
        h.setFormatter(fmt)
        root.addHandler(h)
    root.setLevel(logging.INFO)


def _validate_nodes(cfg: Config, nodes: list[str]) -> None:
    stray = [n for n in nodes if cfg.pool_of(n) is None]
    if stray:
        raise BadInput(f"node {stray[0]!r} is not in any slurmscale pool"
                       + (f" (and {len(stray) - 1} more)" if len(stray) > 1 else ""))


def _read_resume_file() -> str | None:
    path = os.environ.get("SLURM_RESUME_FILE")
    if not path:
        return None
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise BadInput(f"cannot read SLURM_RESUME_FILE {path}: {e.strerror}") from None
    if len(raw) > MAX_TEXT:
        raise BadInput(f"SLURM_RESUME_FILE {path} is larger than {MAX_TEXT} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"SLURM_RESUME_FILE {path} is not UTF-8 text (byte {e.start})") from None


def build_request(cfg: Config, kind: RequestKind, argv: list[str],
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


def run_hook(kind: RequestKind, argv: list[str], config_path: str | None = None) -> int:
    started = time.monotonic()
    try:
        resume_text = _read_resume_file() if kind is RequestKind.RESUME else None
    except BadInput as e:
        resume_text, early_error = None, e
    else:
        early_error = None
    try:
        cfg = load_config(config_path)
    except ConfigError as e:
        _setup_logging(None)
        log.error("%s hook: %s", kind.value, e)
        return EXIT_FAILED
    _setup_logging(cfg)
    try:
        if early_error is not None:
            raise early_error
        nodes, resume_text = build_request(cfg, kind, argv, resume_text)
    except BadInput as e:
        log.error("%s hook refused %r: %s; nothing recorded", kind.value, argv, e)
        return EXIT_BAD_INPUT
    spool = Spool(cfg.spool_dir)
    req = spool.new_request(kind, nodes, argv[0], resume_text)
    try:
        spool.put(req)
    except OSError as e:
        log.error("%s hook could not record request for %s in %s: %s", kind.value, argv[0],
                  cfg.spool_dir, e)
        return EXIT_FAILED
    poked = poke(cfg.socket_path)
    log.info("%s %s recorded as %s in %.0f ms (daemon %s)", kind.value, argv[0], req.id,
             (time.monotonic() - started) * 1000, "poked" if poked else "not reachable")
    return EXIT_OK


def main() -> None:
    kinds = {"resume": RequestKind.RESUME, "suspend": RequestKind.SUSPEND,
             "resume-fail": RequestKind.RESUME_FAIL}
    if len(sys.argv) < 2 or sys.argv[1] not in kinds:
        print(f"usage: python -m slurmscale.hooks {{{'|'.join(kinds)}}} HOSTLIST",
              file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(run_hook(kinds[sys.argv[1]], sys.argv[2:]))


if __name__ == "__main__":
    main()
