"""What ships for real clusters: systemd units whose commands this slurmscale accepts, and
JSON-lines logs."""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path

import click

from slurmscale.cli import JsonLines, cli

UNITS = Path(__file__).resolve().parents[2] / "slurm_conf" / "systemd"


def _exec_lines(unit: Path) -> list[list[str]]:
    return [shlex.split(line.split("=", 1)[1]) for line in unit.read_text().splitlines()
            if line.startswith(("ExecStart=", "ExecStartPre="))]


def test_every_unit_command_is_a_valid_slurmscale_invocation() -> None:
    units = sorted(UNITS.glob("*.service"))
    assert [u.name for u in units] == ["slurmscale-report.service", "slurmscale.service"]
    seen = []
    for unit in units:
        text = unit.read_text()
        assert "[Service]" in text and "SLURMSCALE_CONFIG=" in text
        for argv in _exec_lines(unit):
            if argv[0] == "+/usr/bin/install":  # (the spool, made as root before the start)
                assert argv[1:2] == ["-d"], argv
                continue
            assert argv[0].endswith("/bin/slurmscale"), argv
            ctx = click.Context(cli, info_name="slurmscale", obj={})
            _, cmd, rest = cli.resolve_command(ctx, argv[1:])
            assert cmd is not None, argv
            if isinstance(cmd, click.Group):
                _, cmd, rest = cmd.resolve_command(ctx, rest)
                assert cmd is not None, argv
            cmd.make_context(argv[1], rest, parent=ctx)  # raises on a bad option
            seen.append(" ".join(argv[1:3]))
    assert "daemon" in seen and "report --since" in seen
    timer = (UNITS / "slurmscale-report.timer").read_text()
    assert "OnCalendar=" in timer and "Persistent=true" in timer


def test_json_log_lines_parse_and_carry_the_exception() -> None:
    rec = logging.LogRecord("slurmscale.daemon", logging.ERROR, __file__, 1, "pass %s failed",
                            ("7",), None)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys
        rec.exc_info = sys.exc_info()
    out = json.loads(JsonLines().format(rec))
    assert (out["level"], out["logger"], out["message"]) == ("error", "slurmscale.daemon",
                                                             "pass 7 failed")
    assert "RuntimeError: boom" in out["exception"] and out["at"].endswith("+00:00")


def test_the_grafana_dashboard_graphs_only_metrics_the_daemon_exports() -> None:
    import re

    from slurmscale.daemon.metrics import Metrics

    dash = json.loads((UNITS.parents[1] / "docs" / "grafana-dashboard.json").read_text())
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "gauge": ("",)}
    exported = {f.name + s for f in Metrics().registry.collect() for s in suffixes[f.type]}
    used = {m for p in dash["panels"] for t in p["targets"]
            for m in re.findall(r"slurmscale_[a-z0-9_]+", t["expr"])}
    assert used and used <= exported, used - exported


def test_the_dashboard_has_the_panels_an_admin_watches_and_counters_start_at_zero() -> None:
    """Panels for boot failures, replacements, capacity backoff, paid capacity and AWS calls
    failing; every audit kind and each pool's launch and replacement counters exported at 0
    from the start, so the admin guide's `increase(...) > 0` alerts see the first event
    after a restart (before: a labelled series was born at 1, with no increase)."""
    from slurmscale.audit import Kind
    from slurmscale.daemon.metrics import Metrics

    dash = json.loads((UNITS.parents[1] / "docs" / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for name in ("slurmscale_boot_failures_total", "slurmscale_node_replacements_total",
                 "slurmscale_capacity_backoff_seconds", "slurmscale_paid_node_hours",
                 "slurmscale_ec2_call_failures_total"):
        assert name in exprs, name
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    m = Metrics()
    m.preset([("gpu-spot", "spot")])
    text = m.text()
    for kind in Kind:
        assert f'slurmscale_events_total{{kind="{kind.value}"}} 0.0' in text, kind
    assert ('slurmscale_launches_total{capacity_type="spot",code="",pool="gpu-spot",'
            'result="failed"} 0.0') in text
    assert 'slurmscale_node_replacements_total{cause="not-responding",pool="gpu-spot"} 0.0' \
        in text


def test_the_logrotate_snippet_rotates_both_default_logs_as_slurmuser() -> None:
    """The daemon's and the hooks' default logs match its pattern; files are made again as
    SlurmUser's (`install` rewrites the user), and nothing truncates a file in place."""
    import fnmatch

    from slurmscale.config import Config
    from slurmscale.install import _rewrite
    from slurmscale.shipped import shipped

    text = shipped("logrotate/slurmscale").read_text()
    pattern = next(line.split()[0] for line in text.splitlines() if line.startswith("/"))
    defaults = Config.model_fields
    for key in ("log_file", "hook_log_file"):
        assert fnmatch.fnmatch(str(defaults[key].default), pattern), key
    assert "copytruncate" not in text.replace("no copytruncate", "")
    mine = _rewrite(text, Path("/"), "slurmx", "slurmy")
    assert "create 0640 slurmx slurmy" in mine and "su slurmx slurmy" in mine


def test_uninstall_removes_what_install_put_and_keeps_what_an_admin_changed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """By install's record: every file still as installed goes, with the hook links; the
    edited config stays (named); the data directories stay; a dry run changes nothing."""
    import os
    import pwd

    from slurmscale.install import RECORD, install, uninstall

    me = pwd.getpwuid(os.getuid()).pw_name
    out = install(tmp_path, me)
    assert out.refused == 0
    installed = sorted(p for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink())
    config = tmp_path / "etc/slurmscale/slurmscale.yaml"
    config.write_text(config.read_text() + "# the site's edit\n")
    before = {p: p.read_bytes() for p in installed if p.is_file()}
    dry = uninstall(tmp_path, dry_run=True)
    assert any(line.startswith("would remove") for line in dry.lines)
    assert {p: p.read_bytes() for p in installed if p.is_file()} == before
    out = uninstall(tmp_path)
    left = sorted(p for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink())
    assert left == [config, tmp_path / RECORD], left
    assert f"kept       {config}: changed since it was installed" in out.lines
    for d in ("var/spool/slurmscale", "var/log/slurmscale", "var/lib/slurmscale"):
        assert (tmp_path / d).is_dir()
    config.unlink()
    uninstall(tmp_path)
    assert not (tmp_path / RECORD).exists()


def test_the_version_is_one_and_has_its_changelog_entry() -> None:
    """pyproject takes the package's __version__; CHANGELOG.md's newest entry is it (before:
    0.1.0 after six schema migrations, so `pip install --upgrade` did nothing)."""
    import re

    from slurmscale import __version__

    root = Path(__file__).resolve().parents[2]
    assert 'dynamic = ["version"]' in (root / "pyproject.toml").read_text()
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    entries = re.findall(r"^## (\S+)", (root / "CHANGELOG.md").read_text(), re.M)
    assert entries[0] == __version__ and len(set(entries)) == len(entries)
