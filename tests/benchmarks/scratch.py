"""A benchmark's temporary directory, removed when it is done (a benchmark run again and again
must not fill the disk), or kept and named with KEEP=1 (to look at its logs)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def done_with(root: Path) -> None:
    if os.environ.get("KEEP"):
        print(root)
    else:
        shutil.rmtree(root, ignore_errors=True)
