"""The durable hand-off between the hooks and the daemon.

A hook must record its request durably and exit fast whether or not the daemon is up, and
must not need the database driver. It writes one JSON file per request into
`<spool_dir>/incoming` (write to tmp, fsync, rename, fsync the directory), so a request is
either wholly there or not there at all. The daemon moves each file into the store and only
then deletes it; a crash in between re-reads the file and the store ignores the duplicate id.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple, Protocol

from slurmscale.hostlists import NODE_NAME
from slurmscale.ownership import own_like


class RequestKind(StrEnum):
    """Which hook recorded a request (the hooks are named after these)."""

    RESUME = "resume"
    SUSPEND = "suspend"
    RESUME_FAIL = "resume_fail"


REQUEST_ID = re.compile(r"[0-9]{13}-[0-9a-f]{12}")  # what new_request makes
MAX_NODES = 100_000
MAX_TEXT = 4 * 1024 * 1024  # a hostlist or resume file larger than this is not Slurm's
# a spool file carries a hostlist and a resume file's text, JSON-escaped: at most this
MAX_SPOOL_FILE = 4 * MAX_TEXT


class NotSmallFile(Exception):
    """A file that is not read: not a regular file, a link where none may be, too large."""


def read_small(path: str | Path, limit: int, follow: bool = True) -> bytes:
    """A small regular file's bytes, read without trusting what the path is: opened
    non-blocking (a FIFO would block the reader for good), never a link unless `follow`, its
    type and size looked at before any byte is read (/dev/zero never ends; a 200 MB file
    would be read whole before its size refused it), at most `limit` bytes. Raises
    NotSmallFile, or OSError for a file that cannot be opened."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if not follow and os.path.islink(path):
            raise NotSmallFile("a symbolic link") from None
        raise e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotSmallFile("not a regular file")
        if st.st_size > limit:
            raise NotSmallFile(f"larger than {limit} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(raw) > limit:  # (grown since the stat)
        raise NotSmallFile(f"larger than {limit} bytes")
    return raw
LATEST_TIME = 4102444800.0  # 2100-01-01: any later "received_at" is garbage


class SpooledRequest(NamedTuple):
    """One hook call as recorded (a NamedTuple: the hook imports no dataclasses)."""

    id: str
    kind: RequestKind
    nodes: tuple[str, ...]
    hostlist: str
    resume_file: str | None
    received_at: float

    def to_json(self) -> str:
        d = self._asdict()
        d["kind"] = self.kind.value
        d["nodes"] = list(self.nodes)
        return json.dumps(d, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> SpooledRequest:
        """A spool file's request, every field checked: a file is data from disk, and one
        that is valid JSON with an absurd value (a time of 1e20, a node name Slurm cannot
        have) must be refused here, not deep inside the daemon's pass."""
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        rid, nodes, hostlist, rf = d["id"], d["nodes"], d["hostlist"], d.get("resume_file")
        received_at = d["received_at"]
        if not (isinstance(rid, str) and REQUEST_ID.fullmatch(rid)):
            raise ValueError(f"bad request id {rid!r}")
        if not (isinstance(nodes, list) and 0 < len(nodes) <= MAX_NODES
                and all(isinstance(n, str) and NODE_NAME.fullmatch(n) for n in nodes)):
            raise ValueError("bad node list")
        if not (isinstance(hostlist, str) and 0 < len(hostlist) <= MAX_TEXT):
            raise ValueError("bad hostlist")
        if rf is not None and not (isinstance(rf, str) and len(rf) <= MAX_TEXT):
            raise ValueError("bad resume file")
        if isinstance(received_at, bool) or not isinstance(received_at, int | float) \
                or not 0 <= received_at <= LATEST_TIME:
            raise ValueError(f"bad received_at {received_at!r}")
        return SpooledRequest(id=rid, kind=RequestKind(d["kind"]), nodes=tuple(nodes),
                              hostlist=hostlist, resume_file=rf,
                              received_at=float(received_at))


class RequestSource(Protocol):
    """Where the hooks' requests wait for the daemon: the spool directory (`Spool`), or the
    simulator's hooks (`sim/daemon.py`). Each is named by a path, which `done` forgets and
    `reject` sets aside."""

    def pending(self) -> Iterator[tuple[Path, SpooledRequest | str]]: ...

    def done(self, path: Path) -> None: ...

    def reject(self, path: Path) -> None: ...


class Spool:
    """Implements `RequestSource`: one JSON file a request, written atomically by the hook."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.incoming = self.root / "incoming"
        self.tmp = self.root / "tmp"
        self.rejected = self.root / "rejected"

    def ensure(self) -> None:
        for d in (self.incoming, self.tmp, self.rejected):
            d.mkdir(parents=True, exist_ok=True, mode=0o750)

    def new_request(self, kind: RequestKind, nodes: list[str], hostlist: str,
                    resume_file: str | None, now: float | None = None) -> SpooledRequest:
        now = time.time() if now is None else now
        return SpooledRequest(
            id=f"{int(now * 1000):013d}-{os.urandom(6).hex()}",
            kind=kind, nodes=tuple(nodes), hostlist=hostlist, resume_file=resume_file,
            received_at=now,
        )

    def put(self, req: SpooledRequest) -> Path:
        self.ensure()
        name = f"{req.id}.json"
        tmp = self.tmp / name
        final = self.incoming / name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        try:
            # root (an admin's `slurmscale resume`) writing SlurmUser's spool: the file is the
            # spool's owner's, or the daemon (SlurmUser) could not read it (0640)
            own_like(fd, self.tmp)
            os.write(fd, req.to_json().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        dfd = os.open(self.incoming, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return final

    def pending(self) -> Iterator[tuple[Path, SpooledRequest | str]]:
        """Spooled requests, oldest first; for a file that is not one, why not (a hook
        writes regular files by rename: a FIFO, a link or a huge file is someone else's)."""
        if not self.incoming.is_dir():
            return
        for p in sorted(self.incoming.glob("*.json")):
            try:
                raw = read_small(p, MAX_SPOOL_FILE, follow=False)
                yield p, SpooledRequest.from_json(raw.decode("utf-8"))
            except NotSmallFile as e:
                yield p, str(e)
            except OSError as e:
                yield p, f"unreadable ({e.strerror})"
            except (ValueError, KeyError, TypeError, RecursionError):
                yield p, "not a request (invalid)"

    def reject(self, path: Path) -> None:
        self.rejected.mkdir(parents=True, exist_ok=True)
        os.replace(path, self.rejected / path.name)

    def done(self, path: Path) -> None:
        path.unlink(missing_ok=True)
