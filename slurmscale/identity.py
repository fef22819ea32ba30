"""Who this process is to the outside: its host and PID, and the names it gives its database
sessions and its AWS requests. With two daemons (HA on PostgreSQL) an admin must tell them
apart where their traces land: `pg_stat_activity` (and a statement log's `%a`) shows a
session's application_name, and CloudTrail records each AWS call's user agent."""

from __future__ import annotations

import os
import socket
from urllib.parse import parse_qs, urlsplit

from slurmscale import __version__

# PostgreSQL keeps an application_name's first NAMEDATALEN-1 bytes (63 by default)
_PG_NAME_MAX = 63


def identity() -> str:
    """Who holds the lease, for logs and events: host and PID."""
    return f"{socket.gethostname()}:{os.getpid()}"


def application_name(role: str) -> str:
    """A PostgreSQL session's name: `slurmscale-<role> <host>:<pid>`. The PID last, so a
    long host name is what gets cut."""
    pid = f":{os.getpid()}"
    head = f"slurmscale-{role} {socket.gethostname()}"
    return head[:_PG_NAME_MAX - len(pid)] + pid


def session_args(url: str, role: str) -> dict[str, str]:
    """The connect_args that name a PostgreSQL session (`application_name`) for this process
    in `role`; {} for another database, or a URL that names its sessions itself."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgresql") or "application_name" in parse_qs(parts.query):
        return {}
    return {"application_name": application_name(role)}


def user_agent_extra() -> str:
    """What slurmscale adds to botocore's user agent: its version and this process."""
    return f"slurmscale/{__version__} ({identity()})"
