"""Files root makes for SlurmUser: an admin's `sudo slurmscale ...` beside a daemon that runs
as SlurmUser (the shipped unit) must leave the store, its WAL files and the spool's request
files that user's, or the daemon cannot read or write its own state. Only the os module: the
hooks import this."""

from __future__ import annotations

import os
from pathlib import Path


def own_like(path: Path | int, model: Path) -> None:
    """Run as root, give `path` (or an open file descriptor) `model`'s owner and group when
    they differ; anyone else owns what it makes and changes nothing here."""
    if os.geteuid() != 0:
        return
    st = model.stat()
    if isinstance(path, int):
        os.fchown(path, st.st_uid, st.st_gid)
    else:
        now = path.stat()
        if (now.st_uid, now.st_gid) != (st.st_uid, st.st_gid):
            os.chown(path, st.st_uid, st.st_gid)
