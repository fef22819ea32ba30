"""The hook scripts as slurmctld runs them: no PATH, closed stdio, exit code is all it sees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.conftest import base_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def hooks(tmp_path):  # type: ignore[no-untyped-def]
    d = tmp_path / "hooks"
    d.mkdir()
    shutil.copy2(REPO / "resume_suspend" / "slurmscale-hook", d / "slurmscale-hook")
    for k in ("resume", "suspend", "resume-fail"):
        (d / f"slurmscale-{k}").symlink_to("slurmscale-hook")
    cfg = base_config(spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "s.sock"),
                      hook_log_file=str(tmp_path / "hooks.log"))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "spool").mkdir()  # as the install makes it
    (d / "hooks.env").write_text(f"SLURMSCALE_PYTHON={sys.executable}\n"
                                 f"SLURMSCALE_CONFIG={tmp_path / 'c.yaml'}\n"
                                 f"SLURMSCALE_HOOK_VIEW={tmp_path / 'spool' / 'hookview.json'}\n")
    return tmp_path


def run(root: Path, kind: str, *args: str, resume: str | None = None) -> int:
    env = {"SLURM_CONF": "/nonexistent/slurm.conf"}
    if resume is not None:
        (root / "rf.json").write_text(resume)
        env["SLURM_RESUME_FILE"] = str(root / "rf.json")
    return subprocess.run([str(root / "hooks" / f"slurmscale-{kind}"), *args], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=30).returncode


def spooled(root: Path) -> list[dict]:
    inc = root / "spool" / "incoming"
    return [json.loads(p.read_text()) for p in sorted(inc.glob("*.json"))] if inc.exists() else []


def test_resume_records_the_request_and_the_resume_file(hooks) -> None:  # type: ignore[no-untyped-def]
    rf = '{"jobs":[{"job_id":5,"nodes":"spot-[1-2]"}],"all_nodes":"spot-[1-2]"}'
    assert run(hooks, "resume", "spot-[1-2]", resume=rf) == 0
    (req,) = spooled(hooks)
    assert req["kind"] == "resume" and req["nodes"] == ["spot-1", "spot-2"]
    assert req["resume_file"] == rf
    assert "daemon not reachable" in (hooks / "hooks.log").read_text()


@pytest.mark.parametrize("kind", ["suspend", "resume-fail"])
def test_suspend_and_resume_fail_record_their_kind(hooks, kind) -> None:  # type: ignore[no-untyped-def]
    assert run(hooks, kind, "od-[1-2]") == 0
    assert spooled(hooks)[0]["kind"] == kind.replace("-", "_")


@pytest.mark.parametrize("kind, args, resume, needle", [
    ("resume", ["spot-[1-"], None, "unparsable hostlist 'spot-[1-'"),
    ("suspend", ["gpu-[1-2]"], None, "node 'gpu-1' is not in any slurmscale pool"),
    ("resume-fail", ["spot-99"], None, "node 'spot-99' is not in any slurmscale pool"),
    ("resume", ["spot-1"], "{broken", "resume file is not JSON"),
    ("resume", ["spot-1"], '{"jobs":[{"job_id":1,"nodes":"spot-[1-2]"}]}',
     "resume file names nodes not in the hostlist"),
    ("resume", [], None, "expected exactly one hostlist argument"),
    ("suspend", ["a", "b"], None, "expected exactly one hostlist argument"),
])
def test_bad_input_exits_2_names_the_value_and_records_nothing(hooks, kind, args, resume,  # type: ignore[no-untyped-def]
                                                               needle) -> None:
    assert run(hooks, kind, *args, resume=resume) == 2
    assert spooled(hooks) == []
    assert needle in (hooks / "hooks.log").read_text()


def test_a_bad_config_exits_1_and_records_nothing(hooks) -> None:  # type: ignore[no-untyped-def]
    cfg = yaml.safe_load((hooks / "c.yaml").read_text())
    cfg["pools"][0]["launch_template"]["version"] = "$Latest"
    (hooks / "c.yaml").write_text(yaml.safe_dump(cfg))
    p = subprocess.run([str(hooks / "hooks" / "slurmscale-suspend"), "spot-1"], env={},
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert "pools.0.launch_template.version" in p.stderr and "$Latest" in p.stderr
    assert spooled(hooks) == []


def test_the_cli_reports_config_errors_with_exit_2(hooks) -> None:  # type: ignore[no-untyped-def]
    (hooks / "c.yaml").write_text("cluster_name: x\npools: []\n")
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(hooks / "c.yaml"),
                        "status"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "pools" in p.stderr and "at least 1" in p.stderr


@pytest.mark.parametrize("expr", ["spot-\uff11", "spot-\u0663", "spot-\u00b2"])
def test_a_node_name_with_a_digit_slurm_does_not_read_is_bad_input(tmp_path, expr: str) -> None:  # type: ignore[no-untyped-def]
    """Python's isdigit() takes these for digits; Slurm's node names are ASCII. Before the
    fix the first two were spooled (and an instance launched for a node Slurm refused), the
    third crashed with a traceback."""
    import subprocess
    import sys

    import yaml

    from tests.unit.conftest import base_config

    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(base_config(spool_dir=str(tmp_path / "spool"),
                                               socket_path=str(tmp_path / "s.sock"),
                                               hook_log_file=str(tmp_path / "h.log"))))
    conf.chmod(0o644)
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), "suspend",
                        expr], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not list((tmp_path / "spool").rglob("*.json"))


@pytest.mark.parametrize(("content", "needle"), [
    (b'{"jobs": [{"job_id": 1, "nodes": "spot-1"}], "all_nodes": "spot-\xff"}', "not UTF-8"),
    (b"[" * 100_000, "nests too deeply")])
def test_a_hostile_resume_file_is_bad_input_not_a_traceback(hooks, content: bytes,  # type: ignore[no-untyped-def]
                                                            needle: str) -> None:
    """Before: a non-UTF-8 resume file and one of 100,000 '[' ended in a traceback, exit 1."""
    (hooks / "rf.json").write_bytes(content)
    p = subprocess.run([str(hooks / "hooks" / "slurmscale-resume"), "spot-1"],
                       env={"SLURM_CONF": "/nonexistent", "SLURM_RESUME_FILE":
                            str(hooks / "rf.json")}, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stderr
    assert spooled(hooks) == [] and needle in (hooks / "hooks.log").read_text()
    assert "Traceback" not in p.stderr + (hooks / "hooks.log").read_text()


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_resume_file_that_is_not_a_regular_file_is_refused_unread(hooks, special: str) -> None:  # type: ignore[no-untyped-def]
    """Before: /dev/zero was read whole (4 GB in 4 s, then a MemoryError traceback) and a
    FIFO blocked the hook until slurmctld's script timeout."""
    path = hooks / "rf.fifo" if special == "fifo" else Path(special)
    if special == "fifo":
        os.mkfifo(path)
    p = subprocess.run([str(hooks / "hooks" / "slurmscale-resume"), "spot-1"],
                       env={"SLURM_CONF": "/nonexistent", "SLURM_RESUME_FILE": str(path)},
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2, p.stderr
    assert spooled(hooks) == [] and "is not a regular file" in (hooks / "hooks.log").read_text()


@pytest.mark.parametrize(("url", "needle"), [
    ("notaurl", "Could not parse"), ("mysql://u@127.0.0.1:9/x", "no database driver"),
    ("sqlite:////proc/slurmscale-none/x.db", "No such file or directory")])
@pytest.mark.parametrize("cmd", [["status"], ["events"], ["nodes"], ["report"],
                                 ["db", "upgrade"], ["daemon"]])
def test_a_store_that_cannot_be_opened_is_one_line_exit_2(tmp_path, url: str, needle: str,
                                                          cmd: list[str]) -> None:
    """Before: a traceback from SQLAlchemy (or the filesystem) for every command."""
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(base_config(
        store_url=url, spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "s.sock"),
        hook_log_file=str(tmp_path / "h.log"), log_file=None)))
    conf.chmod(0o644)
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), *cmd],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_socket_directory_that_cannot_be_made_stops_the_daemon_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(base_config(
        store_url=f"sqlite:///{tmp_path / 's.db'}", spool_dir=str(tmp_path / "spool"),
        socket_path="/proc/slurmscale-none/s.sock", hook_log_file=str(tmp_path / "h.log"),
        log_file=None)))
    conf.chmod(0o644)
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), "daemon"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "socket_path" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(("since", "needle"), [("99999999999d", "100 years"),
                                               ("\u00b2h", "neither a duration")])
@pytest.mark.parametrize("cmd", ["events", "report"])
def test_a_since_out_of_reach_is_named(tmp_path, since: str, needle: str, cmd: str) -> None:  # type: ignore[no-untyped-def]
    """Before: OverflowError (a timedelta too large) or ValueError (int('²')) tracebacks."""
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(base_config(
        store_url=f"sqlite:///{tmp_path / 's.db'}", spool_dir=str(tmp_path / "spool"),
        socket_path=str(tmp_path / "s.sock"), hook_log_file=str(tmp_path / "h.log"))))
    conf.chmod(0o644)
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), "db",
                        "upgrade"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), cmd,
                        "--since", since], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr


# --- the compiled view of the config (hookview.py): fast, never wrong -----------------------

def _log_lines(root: Path) -> list[str]:
    return (root / "hooks.log").read_text().splitlines()


def test_the_first_hook_compiles_the_view_and_the_next_ones_use_it(hooks) -> None:  # type: ignore[no-untyped-def]
    assert run(hooks, "suspend", "spot-1") == 0
    assert "config validated: no view at" in _log_lines(hooks)[-1]
    assert (hooks / "spool" / "hookview.json").exists()
    assert run(hooks, "resume", "spot-[1-2]",
               resume='{"jobs":[{"job_id":5,"nodes":"spot-[1-2]"}],"all_nodes":"spot-[1-2]"}') == 0
    assert "config from its view" in _log_lines(hooks)[-1]
    # the view refuses what the config refuses, with the same words
    assert run(hooks, "suspend", "spot-9") == 2
    assert "node 'spot-9' is not in any slurmscale pool" in _log_lines(hooks)[-1]
    assert [r["nodes"] for r in spooled(hooks)] in (
        [["spot-1"], ["spot-1", "spot-2"]], [["spot-1", "spot-2"], ["spot-1"]])


def test_the_fast_path_imports_neither_pydantic_nor_yaml(hooks) -> None:  # type: ignore[no-untyped-def]
    assert run(hooks, "suspend", "spot-1") == 0  # compiles the view
    code = ("import sys\nfrom slurmscale.hooks import run_hook\nfrom slurmscale.spool import "
            "RequestKind\nrc = run_hook(RequestKind.SUSPEND, ['od-1'])\n"
            "print(rc, sorted(m for m in ('pydantic', 'yaml', 'sqlalchemy', 'boto3', "
            "'logging', 'dataclasses') if m in sys.modules))")
    env = {"SLURMSCALE_CONFIG": str(hooks / "c.yaml"),
           "SLURMSCALE_HOOK_VIEW": str(hooks / "spool" / "hookview.json")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=30, cwd=REPO)
    assert out.stdout.split("\n")[0] == "0 []", out.stdout + out.stderr
    assert "config from its view" in _log_lines(hooks)[-1]


def test_an_edited_config_is_validated_again_never_read_through_a_stale_view(hooks) -> None:  # type: ignore[no-untyped-def]
    assert run(hooks, "suspend", "spot-8") == 0
    cfg = yaml.safe_load((hooks / "c.yaml").read_text())
    cfg["pools"][0]["max_nodes"] = 4  # spot-8 is no longer a node
    (hooks / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert run(hooks, "suspend", "spot-8") == 2
    assert "changed since the view was written" in _log_lines(hooks)[-1]
    assert "node 'spot-8' is not in any slurmscale pool" in _log_lines(hooks)[-1]
    assert run(hooks, "suspend", "spot-4") == 0
    assert "config from its view" in _log_lines(hooks)[-1]


def test_a_config_made_writable_by_others_is_refused_though_the_view_is_current(hooks) -> None:  # type: ignore[no-untyped-def]
    assert run(hooks, "suspend", "spot-1") == 0
    (hooks / "c.yaml").chmod(0o664)
    p = subprocess.run([str(hooks / "hooks" / "slurmscale-suspend"), "spot-2"], env={},
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "group- or world-writable" in p.stderr
    assert len(spooled(hooks)) == 1


def test_a_store_password_in_a_config_made_world_readable_is_refused(hooks) -> None:  # type: ignore[no-untyped-def]
    cfg = yaml.safe_load((hooks / "c.yaml").read_text())
    cfg["store_url"] = "postgresql://u:hunter2@127.0.0.1/s"
    (hooks / "c.yaml").write_text(yaml.safe_dump(cfg))
    (hooks / "c.yaml").chmod(0o600)
    assert run(hooks, "suspend", "spot-1") == 0
    (hooks / "c.yaml").chmod(0o644)
    p = subprocess.run([str(hooks / "hooks" / "slurmscale-suspend"), "spot-2"], env={},
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "world-readable" in p.stderr and "hunter2" not in p.stderr


@pytest.mark.parametrize("garbage", [b"", b"{", b"\xff\xfe", b"[]", b'{"pools": 1}',
                                     b'{"format": 1, "pools": [["spot-", 0]]}'])
def test_a_garbled_view_costs_speed_not_correctness(hooks, garbage: bytes) -> None:  # type: ignore[no-untyped-def]
    assert run(hooks, "suspend", "spot-1") == 0
    (hooks / "spool" / "hookview.json").write_bytes(garbage)
    assert run(hooks, "suspend", "spot-2") == 0
    assert "config validated: view" in _log_lines(hooks)[-1]
    assert run(hooks, "suspend", "spot-3") == 0
    assert "config from its view" in _log_lines(hooks)[-1]


def test_a_view_of_another_config_or_slurmscale_is_not_used(hooks) -> None:  # type: ignore[no-untyped-def]
    assert run(hooks, "suspend", "spot-1") == 0
    view = hooks / "spool" / "hookview.json"
    d = json.loads(view.read_text())
    for key, value, why in (("config_path", "/etc/other.yaml", "of another config"),
                            ("version", "0.0.1", "from another slurmscale")):
        view.write_text(json.dumps({**d, key: value}))
        assert run(hooks, "suspend", "spot-2") == 0
        assert why in _log_lines(hooks)[-1]


def test_a_view_that_cannot_be_written_says_where_to_put_it(hooks) -> None:  # type: ignore[no-untyped-def]
    env = (hooks / "hooks" / "hooks.env").read_text().replace(
        str(hooks / "spool" / "hookview.json"), "/proc/nowhere/hookview.json")
    (hooks / "hooks" / "hooks.env").write_text(env)
    assert run(hooks, "suspend", "spot-1") == 0
    assert f"set SLURMSCALE_HOOK_VIEW={hooks / 'spool' / 'hookview.json'}" in \
        _log_lines(hooks)[-1]
