"""Work done aside: a function run in a child process (forked) while this one goes on, its
value handed back through a pipe.

For a one-shot command only (`plan --live`): it uses a second core for work the command
would otherwise wait on in turn (the store's read, which is SQLAlchemy's import; the gangs'
standings, which are sprio's read and a sweep over the queue). Never in the daemon: a fork
copies a process's threads' locks and its open connections as they stand.

The child's answer is ("ok", value), ("exit", (code, what it printed)) when it called
sys.exit (a CLI opener that said why it cannot go on) or ("error", text) when it raised.
Only this child is ever waited for or signalled, by its PID.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any, Generic, NoReturn, TypeVar

T = TypeVar("T")


class AsideFailed(RuntimeError):
    """The child raised (its first line, with the exception's type) or ended with no answer."""


class Aside(Generic[T]):
    """`fn()` in a child process from now on; `result()` waits for its value (raises
    AsideFailed, or exits as the child did); `close()` ends a child whose answer was never
    waited for. The value must pickle."""

    def __init__(self, fn: Callable[[], T]) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _child(w, fn)  # (never returns)
        os.close(w)
        self.pid: int | None = pid
        self._r = r
        self._done = False
        self._value: T | None = None

    def result(self) -> T:
        if self._done:
            return self._value  # type: ignore[return-value]
        if self.pid is None:
            raise AsideFailed("the child was ended before its answer was read")
        with os.fdopen(self._r, "rb") as f:
            data = f.read()
        os.waitpid(self.pid, 0)
        self.pid = None
        if not data:
            raise AsideFailed("the process ended without an answer")
        kind, value = pickle.loads(data)  # (our own child's bytes, through our own pipe)
        if kind == "exit":
            code, said = value
            sys.stderr.write(said)
            sys.exit(code)
        if kind == "error":
            raise AsideFailed(value)
        self._done, self._value = True, value
        return value

    def close(self) -> None:
        if self.pid is None:
            return
        os.close(self._r)  # (a child still writing gets EPIPE and ends)
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.pid = None


def _child(w: int, fn: Callable[[], Any]) -> NoReturn:
    """Runs `fn` and writes its answer; then ends the process without running anything the
    parent set up for its own exit. (What it prints to stderr is handed back, not printed
    here: the parent's stderr may be a Python object, a test's capture, that this copy of it
    would keep.)"""
    code = 0
    said = io.StringIO()
    sys.stderr = said
    try:
        try:
            out: tuple[str, Any] = ("ok", fn())
        except SystemExit as e:
            out = ("exit", (e.code if isinstance(e.code, int) else 1, said.getvalue()))
        except Exception as e:  # noqa: BLE001 - handed to the parent, which reports it
            # (its first line: a database error goes on with the SQL and a web link)
            out = ("error", f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
        with os.fdopen(w, "wb") as f:
            pickle.dump(out, f, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - the parent finds no answer and says so
        code = 1
    finally:
        os._exit(code)
