"""The daemon's local API: HTTP/1.0 on a Unix socket for the hooks and the CLI.

Two locks: the socket file is mode 0660, in the group of the users allowed (the SlurmUser's,
whose hooks connect: `daemon.socket_group`), and every connection's peer uid (SO_PEERCRED,
which the kernel fills in and the peer cannot forge) must be in the allow list; anyone else
gets 403 and a log line naming the uid."""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # the API's requests are tiny; anything larger is refused


# The kernel's queue of connections not yet accepted: hooks from a burst of resumes poke at
# once (the default of 5 refused 17 of 30 simultaneous pokes; refused hooks still spool, but
# their pass waits a tick).
BACKLOG = 128


class SocketInUse(RuntimeError):
    """Another live process serves this socket path (a second daemon on the same config)."""


class SocketUnusable(RuntimeError):
    """The socket path cannot be served at all (its directory cannot be made, the file
    system takes no sockets, no permission): a start-up error, one line."""

    def __init__(self, path: Path, e: OSError) -> None:
        super().__init__(f"socket_path {path}: cannot serve the API there: {e.strerror or e}")


def probe_socket_path(socket_path: str) -> None:
    """Raise SocketUnusable unless a Unix socket can be made beside `socket_path` (checked at
    start-up, before the daemon takes the lead: nothing half-done for a bad path)."""
    path = Path(socket_path)
    probe = path.with_name(f".{path.name}.probe-{os.getpid()}")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        s.bind(str(probe))
    except OSError as e:
        raise SocketUnusable(path, e) from None
    finally:
        s.close()
        try:
            probe.unlink()
        except OSError:
            pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = BACKLOG
    allowed_uids: frozenset[int] = frozenset({0})

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone before its answer (a hook killed by slurmctld's timeout, a CLI
        interrupted) is not the daemon's error: one debug line, not socketserver's traceback
        on stderr. Anything else is logged with its traceback, in the daemon's log."""
        import sys

        e = sys.exc_info()[1]
        if isinstance(e, BrokenPipeError | ConnectionResetError | TimeoutError):
            log.debug("API client went away: %s", e)
            return
        log.exception("API request failed")


def _live(path: Path) -> bool:
    """Does a process accept connections on this Unix socket?"""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True  # it exists and is not refusing: treat as live, never take it
    finally:
        s.close()


def peer_uid(conn: socket.socket) -> int:
    """The connecting process's uid, from the kernel (Linux SO_PEERCRED: pid, uid, gid)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", raw)[1])


def _handler(routes: dict[tuple[str, str], Callable[[Any], tuple[int, Any]]]) -> type:
    class Handler(BaseHTTPRequestHandler):
        server_version = "slurmscale"
        timeout = 10  # a client that stalls mid-request loses its connection, not a thread

        server: _Server  # (the one this handler is made for: it carries the allowed uids)

        def _dispatch(self, method: str) -> None:
            uid = peer_uid(self.request)
            if uid not in self.server.allowed_uids:
                log.warning("API %s %s refused: peer uid %d is not allowed (daemon.api_users)",
                            method, self.path, uid)
                self._send(403, {"error": f"uid {uid} may not use this socket"})
                return
            fn = routes.get((method, self.path.split("?", 1)[0]))
            if fn is None:
                self._send(404, {"error": f"no route {method} {self.path}"})
                return
            text = self.headers.get("Content-Length") or "0"
            if not text.isascii() or not text.isdigit() or int(text) > MAX_BODY:
                self._send(400, {"error": f"bad Content-Length {text[:20]!r} (at most "
                                          f"{MAX_BODY} bytes)"})
                return
            length = int(text)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deeply
                self._send(400, {"error": "body is not JSON"})
                return
            try:
                status, data = fn(body)
            except Exception as e:  # noqa: BLE001 - an API error must not kill the daemon
                log.exception("API %s %s failed", method, self.path)
                status, data = 500, {"error": str(e)}
            self._send(status, data)

        def do_GET(self) -> None:  # noqa: N802
            self._dispatch("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._dispatch("POST")

        def _send(self, status: int, data: Any) -> None:
            # bytes: a reply already in JSON (the plan, serialised once per pass)
            payload = data if isinstance(data, bytes) else json.dumps(data, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("api: " + format, *args)

        def address_string(self) -> str:
            return "unix"

    return Handler


def resolve_uids(users: list[str | int]) -> frozenset[int]:
    """User names/uids -> uids; the daemon's own uid always included. Unknown names are
    skipped with a warning (a cluster without a `slurm` user runs SlurmUser=root)."""
    import pwd

    out = {os.geteuid()}
    for u in users:
        if isinstance(u, int):
            out.add(u)
            continue
        try:
            out.add(pwd.getpwnam(u).pw_uid)
        except KeyError:
            log.warning("daemon.api_users: no user %r on this machine; skipped", u)
    return frozenset(out)


def socket_gid(group: str | None, users: list[str | int]) -> int | None:
    """The gid the socket file is given: `group` by name (or number), else the primary group
    of the first of `users` that exists here and is not root (the SlurmUser whose hooks
    connect). None: keep the daemon's own group (no such user; a socket only root may use)."""
    import grp
    import pwd

    if group is not None:
        if group.isdigit():
            return int(group)
        try:
            return grp.getgrnam(group).gr_gid
        except KeyError:
            raise ValueError(f"daemon.socket_group: no group {group!r} on this machine"
                             ) from None
    for u in users:
        try:
            pw = pwd.getpwuid(u) if isinstance(u, int) else pwd.getpwnam(u)
        except KeyError:
            continue
        if pw.pw_uid != 0:
            return pw.pw_gid
    return None


class ApiServer:
    def __init__(self, socket_path: str,
                 routes: dict[tuple[str, str], Callable[[Any], tuple[int, Any]]],
                 allowed_uids: frozenset[int] = frozenset({0}), gid: int | None = None) -> None:
        """`gid`: the socket file's group (None: the daemon's own)."""
        self.path = Path(socket_path)
        self.gid = gid
        try:
            self._bind(routes)
        except OSError as e:
            raise SocketUnusable(self.path, e) from None
        self.server.allowed_uids = allowed_uids
        self.thread = threading.Thread(target=self.server.serve_forever, name="api",
                                       daemon=True)

    def _bind(self, routes: dict[tuple[str, str], Callable[[Any], tuple[int, Any]]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_socket():
            # a socket a live daemon serves is never taken over; one left by a dead daemon is
            if _live(self.path):
                raise SocketInUse(f"{self.path} is served by another live daemon")
            self.path.unlink()
        old_umask = os.umask(0o117)
        try:
            self.server = _Server(str(self.path), _handler(routes))
        finally:
            os.umask(old_umask)
        try:
            self.inode = os.stat(self.path).st_ino  # on stop, only our own socket is removed
            os.chmod(self.path, 0o660)
        except OSError:
            self.server.server_close()
            raise
        if self.gid is not None and self.gid != os.stat(self.path).st_gid:
            try:
                os.chown(self.path, -1, self.gid)
            except OSError as e:  # not root and not in the group: the hooks will say so
                log.error("cannot give socket %s to group %d (%s): only its owner's group "
                          "and root can connect (daemon.socket_group)", self.path, self.gid,
                          e.strerror or e)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        try:
            if os.stat(self.path).st_ino == self.inode:
                self.path.unlink()
        except FileNotFoundError:
            pass
