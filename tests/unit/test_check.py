"""`slurmscale check`: each misconfiguration it knows, caught with a message naming it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from slurmscale.check import HOOKS, SlurmView, check, parse_show_config, seconds
from slurmscale.config import Config, TopologySettings
from slurmscale.config_file import load_config
from slurmscale.hostlists import expand
from tests.unit.conftest import base_config

SHOW_CONFIG = """Configuration data as of 2026-11-29T18:39:18
ResumeFailProgram       = {hooks}/slurmscale-resume-fail
ResumeProgram           = {hooks}/slurmscale-resume
ResumeRate              = 0 nodes/min
ResumeTimeout           = 900 sec
SlurmUser               = nobody(65534)
SlurmctldParameters     = idle_on_node_suspend
SuspendProgram          = {hooks}/slurmscale-suspend
SuspendTime             = 6000 sec
SuspendTimeout          = 120 sec
JobRequeue              = 1
MinJobAge               = 300 sec
GresTypes               = gpu
PrivateData             = cloud
"""


@pytest.fixture
def world() -> Iterator[tuple[Config, SlurmView, Path]]:
    """A setup that passes: hooks 0755, config 0644, spool 0777-sticky, all reachable by
    `nobody` (SlurmUser here), Slurm printing what `slurmscale slurm-conf` renders."""
    d = Path(tempfile.mkdtemp(prefix="ss-check-"))
    os.chmod(d, 0o755)
    hooks = d / "hooks"
    hooks.mkdir(mode=0o755)
    for script in HOOKS.values():
        (hooks / script).write_text("#!/bin/sh\n")
        os.chmod(hooks / script, 0o755)
    spool = d / "spool"
    spool.mkdir()
    os.chmod(spool, 0o1777)
    conf = d / "slurmscale.yaml"
    conf.write_text(yaml.safe_dump(base_config(hooks_dir=str(hooks), spool_dir=str(spool))))
    os.chmod(conf, 0o644)
    cfg = load_config(conf)
    nodes = {n: "IDLE+CLOUD+POWERED_DOWN" for p in cfg.pools for n in expand(p.node_range())}
    view = SlurmView(parse_show_config(SHOW_CONFIG.format(hooks=hooks)),
                     {p.partition for p in cfg.pools}, nodes)
    yield cfg, view, conf
    shutil.rmtree(d)


def codes(cfg: Config, view: SlurmView, conf: Path) -> list[str]:
    return [p.code for p in check(cfg, view, conf)]


def test_a_consistent_setup_has_no_problems(world) -> None:  # type: ignore[no-untyped-def]
    assert check(*world) == []


def test_parsing_scontrol_show_config() -> None:
    c = parse_show_config(SHOW_CONFIG.format(hooks="/h"))
    assert c["ResumeProgram"] == "/h/slurmscale-resume" and c["SlurmUser"] == "nobody(65534)"
    assert (seconds(c["ResumeTimeout"]), seconds("NONE"), seconds("-1")) == (900, None, -1)


def test_a_partition_or_nodes_missing_or_not_cloud(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    v = replace(view, partitions={"gpu-od"})
    assert codes(cfg, v, conf) == ["partition_missing"]
    nodes = dict(view.nodes)
    del nodes["spot-8"]
    nodes["od-1"] = "IDLE"
    assert codes(cfg, replace(view, nodes=nodes), conf) == ["nodes_missing", "nodes_not_cloud"]


def test_hooks_that_are_not_slurmscales_or_not_runnable_by_slurmuser(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    v = replace(view, config={**view.config, "SuspendProgram": "/usr/local/bin/old-suspend"})
    (p,) = check(cfg, v, conf)
    assert p.code == "hook_program" and "/usr/local/bin/old-suspend" in p.message
    os.chmod(Path(cfg.hooks_dir) / "slurmscale-resume", 0o750)
    (p,) = check(cfg, view, conf)
    assert p.code == "hook_not_executable" and "nobody" in p.message and "0750" in p.message


def test_slurmuser_must_read_the_config_and_write_the_spool(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    os.chmod(conf, 0o600)
    os.chmod(cfg.spool_dir, 0o755)
    assert codes(cfg, view, conf) == ["config_unreadable", "spool_not_writable"]


def test_resume_timeout_shorter_than_boot_or_differing_from_the_config(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    short = replace(view, config={**view.config, "ResumeTimeout": "240 sec"})
    (p,) = check(cfg, short, conf)
    assert p.code == "resume_timeout" and "300 s" in p.message
    other = replace(view, config={**view.config, "ResumeTimeout": "1200 sec"})
    assert [(p.severity, p.code) for p in check(cfg, other, conf)] == [
        ("warning", "resume_timeout_mismatch")]


def test_suspend_time_off_or_shorter_than_the_policy(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    for value, needle in (("NONE", "power saving is off"), ("300 sec", "max_idle_s")):
        (p,) = check(cfg, replace(view, config={**view.config, "SuspendTime": value}), conf)
        assert p.code == "suspend_time" and needle in p.message


def test_a_hold_outlasting_suspend_time_needs_slurm_23_02(world) -> None:  # type: ignore[no-untyped-def]
    """SuspendTime 3000 s, holds up to 5400 s: refused where Slurm cannot exclude held nodes
    at run time (no SuspendExcStates: 22.05), fine where it can, fine with holds off."""
    cfg, view, conf = world
    short = {**view.config, "SuspendTime": "3000 sec"}
    (p,) = check(cfg, replace(view, config=short), conf)
    assert p.code == "suspend_time_hold" and "max_hold_s (5400 s)" in p.message
    assert check(cfg, replace(view, config={**short, "SuspendExcStates": "(null)"}), conf) == []
    off = cfg.model_copy(update={"reservations": cfg.reservations.model_copy(
        update={"enabled": False})})
    assert check(off, replace(view, config=short), conf) == []


def test_requeue_and_idle_on_node_suspend_are_warnings(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    v = replace(view, config={**view.config, "JobRequeue": "0", "SlurmctldParameters": "",
                              "MinJobAge": "2 sec"})
    assert [(p.severity, p.code) for p in check(cfg, v, conf)] == [
        ("warning", "job_requeue"), ("warning", "idle_on_node_suspend"),
        ("warning", "min_job_age")]


def test_one_slurmctld_parameters_line_with_slurmscales_and_the_sites_values(world) -> None:  # type: ignore[no-untyped-def]
    """Slurm keeps the last SlurmctldParameters line only: slurm-conf renders one, merging
    configless and the site's values; a slurm.conf whose line drops one of them is an error
    (before: slurm-conf's line and node-image.md's hand-added enable_configless line)."""
    from slurmscale.slurmconf import render_slurm_conf

    cfg, view, conf = world
    site = cfg.model_copy(update={"slurm": cfg.slurm.model_copy(update={
        "configless": True, "ctld_parameters": ["cloud_reg_addrs", "enable_configless"]})})
    lines = [ln for ln in render_slurm_conf(site).splitlines()
             if ln.startswith("SlurmctldParameters=")]
    assert lines == ["SlurmctldParameters=idle_on_node_suspend,enable_configless,"
                     "cloud_reg_addrs"]
    merged = replace(view, config={**view.config, "SlurmctldParameters":
                                   "idle_on_node_suspend,enable_configless,cloud_reg_addrs"})
    assert codes(site, merged, conf) == []
    dropped = replace(view, config={**view.config,
                                    "SlurmctldParameters": "idle_on_node_suspend"})
    (p,) = check(site, dropped, conf)
    assert (p.severity, p.code) == ("error", "ctld_parameters")
    assert "enable_configless, cloud_reg_addrs" in p.message


def test_a_slurm_that_requeues_on_resume_failure_itself_is_told_to(world) -> None:  # type: ignore[no-untyped-def]
    """25.05 added SchedulerParameters=requeue_on_resume_failure: check says so where the
    running Slurm has it and it is off; slurm-conf renders it for that release only."""
    from slurmscale.slurmconf import render_slurm_conf

    cfg, view, conf = world
    old = replace(view, config={**view.config, "SLURM_VERSION": "24.11.5"})
    new = replace(view, config={**view.config, "SLURM_VERSION": "25.05.1"})
    on = replace(view, config={**new.config,
                               "SchedulerParameters": "bf_interval=30,requeue_on_resume_failure"})
    assert codes(cfg, old, conf) == [] and codes(cfg, on, conf) == []
    assert codes(cfg, new, conf) == ["requeue_on_resume_failure"]
    line = "SchedulerParameters=requeue_on_resume_failure"
    assert line in render_slurm_conf(cfg, release=(25, 5))
    assert line in render_slurm_conf(cfg, release=(26, 5))
    assert line not in render_slurm_conf(cfg, release=(24, 11))
    assert line not in render_slurm_conf(cfg)


def test_slurm_25_11s_expedited_requeue_is_rendered_for_it_and_checked(world) -> None:  # type: ignore[no-untyped-def]
    """25.11 added SlurmctldParameters=enable_expedited_requeue: slurm-conf renders it for that
    release on (the site's own values kept), check warns where the running Slurm lacks it,
    and `slurm.expedited_requeue: false` leaves it out of both."""
    from slurmscale.slurmconf import render_slurm_conf

    cfg, view, conf = world
    new = replace(view, config={**view.config, "SLURM_VERSION": "26.05.5",
                                "SchedulerParameters": "requeue_on_resume_failure"})
    on = replace(new, config={**new.config, "SlurmctldParameters":
                              "idle_on_node_suspend,enable_expedited_requeue"})
    assert codes(cfg, new, conf) == ["expedited_requeue"] and codes(cfg, on, conf) == []
    assert "enable_expedited_requeue" in render_slurm_conf(cfg, release=(25, 11))
    assert "enable_expedited_requeue" not in render_slurm_conf(cfg, release=(25, 5))
    assert "enable_expedited_requeue" not in render_slurm_conf(cfg)
    site = render_slurm_conf(cfg, release=(26, 5),
                             site={"slurmctldparameters": ["reboot_from_controller"]})
    assert ("SlurmctldParameters=reboot_from_controller,idle_on_node_suspend,"
            "enable_expedited_requeue") in site
    off = cfg.model_copy(update={"slurm": cfg.slurm.model_copy(
        update={"expedited_requeue": False})})
    assert codes(off, new, conf) == []
    assert "enable_expedited_requeue" not in render_slurm_conf(off, release=(26, 5))


def test_slurm_conf_names_a_bad_release_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    conf = tmp_path / "c.yaml"
    d = base_config()
    for pool in d["pools"]:  # (sizes given: EC2 is not asked; tests/unit/test_node_shapes.py)
        pool.update(cpus_per_node=192, real_memory_mb=1_990_000)
    conf.write_text(yaml.safe_dump(d))
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), "slurm-conf",
                        "--slurm-release", "latest"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--slurm-release" in p.stderr and "Traceback" not in p.stderr
    ok = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf),
                         "slurm-conf", "--slurm-release", "25.05"], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and "requeue_on_resume_failure" in ok.stdout


def test_topology_needs_the_tree_plugin_and_a_file_slurmuser_can_write(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    path = Path(cfg.hooks_dir).parent / "topology.conf"
    topo = cfg.model_copy(update={"topology": TopologySettings(file=str(path))})
    assert codes(topo, view, conf) == ["topology_plugin", "topology_file"]
    tree = replace(view, config={**view.config, "TopologyPlugin": "topology/tree"})
    path.write_text("")
    os.chmod(path, 0o644)  # root's: nobody (SlurmUser here) cannot rewrite it
    (p,) = check(topo, tree, conf)
    assert p.code == "topology_file" and "nobody cannot write" in p.message
    os.chmod(path, 0o666)
    assert check(topo, tree, conf) == []


def test_the_block_plugin_needs_slurm_23_11_and_topology_block(world) -> None:  # type: ignore[no-untyped-def]
    cfg, view, conf = world
    path = Path(cfg.hooks_dir).parent / "topology.conf"
    path.write_text("")
    os.chmod(path, 0o666)
    topo = cfg.model_copy(update={"topology": TopologySettings(file=str(path), plugin="block")})
    old = replace(view, config={**view.config, "TopologyPlugin": "topology/block",
                                "SLURM_VERSION": "22.05.8"})
    (p,) = check(topo, old, conf)
    assert p.code == "topology_plugin" and "23.11 or later (this is 22.05)" in p.message
    tree = replace(view, config={**view.config, "TopologyPlugin": "topology/tree",
                                 "SLURM_VERSION": "26.05.0", "SchedulerParameters":
                                 "requeue_on_resume_failure", "SlurmctldParameters":
                                 "idle_on_node_suspend,enable_expedited_requeue"})
    (p,) = check(topo, tree, conf)
    assert p.code == "topology_plugin" and "expected topology/block" in p.message
    block = replace(tree, config={**tree.config, "TopologyPlugin": "topology/block"})
    assert check(topo, block, conf) == []
