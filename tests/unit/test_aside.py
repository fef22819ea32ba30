"""Work done aside (slurmscale/aside.py): a child's value, its exception, its exit and its end
come back to the parent as the parent would have met them itself."""

from __future__ import annotations

import os
import sys
import time

import pytest

from slurmscale.aside import Aside, AsideFailed


def test_the_value_comes_back_and_is_kept() -> None:
    parent = os.getpid()
    a = Aside(lambda: {"pid": os.getpid(), "big": list(range(100_000))})
    got = a.result()
    assert got["pid"] != parent and got["big"][-1] == 99_999  # (more than a pipe holds)
    assert a.result() is got and a.pid is None  # waited for once
    a.close()  # nothing left to end


def test_an_exception_is_its_first_line_with_its_type() -> None:
    def fail() -> None:
        raise ValueError("table holds is gone\n[SQL: SELECT ...]")
    with pytest.raises(AsideFailed, match=r"^ValueError: table holds is gone$"):
        Aside(fail).result()


def test_an_exit_is_the_parents_with_what_the_child_printed(
        capsys: pytest.CaptureFixture[str]) -> None:
    def refuse() -> None:
        print("slurmscale: the store needs `slurmscale db upgrade`", file=sys.stderr)
        sys.exit(3)
    a = Aside(refuse)
    with pytest.raises(SystemExit) as e:
        a.result()
    assert e.value.code == 3
    assert capsys.readouterr().err == "slurmscale: the store needs `slurmscale db upgrade`\n"


def test_close_ends_a_child_never_waited_for() -> None:
    a = Aside(lambda: time.sleep(60))
    pid = a.pid
    assert pid is not None
    a.close()
    assert a.pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no such child any more
    with pytest.raises(AsideFailed, match="ended before its answer"):
        a.result()


def test_a_child_that_dies_without_an_answer_is_said() -> None:
    with pytest.raises(AsideFailed, match="without an answer"):
        Aside(lambda: os._exit(9)).result()
