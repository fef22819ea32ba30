"""A tiny HTTP-over-Unix-socket client for the daemon's local API (stdlib only, so the hooks
stay fast to start)."""

from __future__ import annotations

import json
import socket
from typing import Any


class ApiError(RuntimeError):
    pass


# `plan` waits this long for the daemon's answer (it completes the gangs' standings on the
# first ask after a pass: under a second at 50,000 jobs) before planning itself
PLAN_TIMEOUT_S = 30.0


def request(socket_path: str, method: str, path: str, body: Any = None,
            timeout: float = 2.0) -> tuple[int, bytes]:
    """The reply's status and its body as sent (JSON)."""
    payload = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.0\r\nHost: slurmscale\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(socket_path)
        s.sendall(head.encode() + payload)
        chunks = []
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            chunks.append(c)
    except OSError as e:
        raise ApiError(f"daemon socket {socket_path}: {e}") from None
    finally:
        s.close()
    raw = b"".join(chunks)
    head_b, _, body_b = raw.partition(b"\r\n\r\n")
    try:
        status = int(head_b.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise ApiError(f"daemon socket {socket_path}: malformed reply") from None
    return status, body_b


def call(socket_path: str, method: str, path: str, body: Any = None,
         timeout: float = 2.0) -> tuple[int, Any]:
    """The reply's status and its body decoded (text where it is not JSON)."""
    status, body_b = request(socket_path, method, path, body, timeout)
    try:
        data = json.loads(body_b) if body_b else None
    except json.JSONDecodeError:
        data = body_b.decode(errors="replace")
    return status, data


def poke(socket_path: str, timeout: float = 0.3) -> bool:
    """Tell the daemon there is work; False when it is not listening (the spool keeps the
    request, so that is not an error)."""
    try:
        status, _ = call(socket_path, "POST", "/v1/poke", timeout=timeout)
    except ApiError:
        return False
    return status == 202
