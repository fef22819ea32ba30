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
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmscale.model import RequestKind


@dataclass(frozen=True)
class SpooledRequest:
    id: str
    kind: RequestKind
    nodes: tuple[str, ...]
    hostlist: str
    resume_file: str | None
    received_at: float

    def to_json(self) -> str:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["nodes"] = list(self.nodes)
        return json.dumps(d, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> SpooledRequest:
        d = json.loads(text)
        return SpooledRequest(
            id=str(d["id"]),
            kind=RequestKind(d["kind"]),
            nodes=tuple(d["nodes"]),
            hostlist=str(d["hostlist"]),
            resume_file=d.get("resume_file"),
            received_at=float(d["received_at"]),
        )


class Spool:
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
            id=f"{int(now * 1000):013d}-{uuid.uuid4().hex[:12]}",
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

    def pending(self) -> Iterator[tuple[Path, SpooledRequest | None]]:
        """Spooled requests, oldest first; None for a file that does not parse."""
        if not self.incoming.is_dir():
            return
        for p in sorted(self.incoming.glob("*.json")):
            try:
                yield p, SpooledRequest.from_json(p.read_text())
            except (ValueError, KeyError, TypeError, OSError):
                yield p, None

    def reject(self, path: Path) -> None:
        self.rejected.mkdir(parents=True, exist_ok=True)
        os.replace(path, self.rejected / path.name)

    def done(self, path: Path) -> None:
        path.unlink(missing_ok=True)
