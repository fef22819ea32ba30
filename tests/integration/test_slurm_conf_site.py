"""slurm.conf by Include on real Slurm 22.05: the site's own GresTypes, PrivateData and
SlurmctldParameters survive slurmscale's lines and a slurmctld restart, and `check` exits 1
when a later line replaced any of them (before: `slurm-conf >>` replaced the site's
PrivateData=jobs,usage with cloud while `check` said ok)."""

from __future__ import annotations

import json
import re

import pytest

from slurmscale.slurm.kv import parse_show_config

pytestmark = pytest.mark.slurm

SITE = ["GresTypes=gpu,mps", "PrivateData=jobs,usage",
        "SlurmctldParameters=enable_configless,reboot_from_controller"]


def _running(c) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    conf = parse_show_config(c.slurm("scontrol", "show", "config"))
    return {k: set(conf[k].split(",")) for k in ("GresTypes", "PrivateData",
                                                 "SlurmctldParameters")}


def test_the_sites_values_survive_slurmscales_lines_and_a_restart(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_cluster(start_daemon=False, slurm_conf_extra=SITE)
    # the local cluster renders as install.md says: its own file, Included last, merged
    assert c.conf.read_text().rstrip().endswith(f"Include {c.slurmscale_conf}")
    want = {"GresTypes": {"gpu", "mps"}, "PrivateData": {"jobs", "usage", "cloud"},
            "SlurmctldParameters": {"enable_configless", "reboot_from_controller",
                                    "idle_on_node_suspend"}}
    assert _running(c) == want
    chk = c.cli("check", "--json")
    assert chk.returncode == 0, chk.stdout + chk.stderr
    # the command an admin runs renders the same merged lines from the site's file
    out = c.cli("slurm-conf", "--site-conf", str(c.conf), "--slurm-release", "22.05")
    assert out.returncode == 0, out.stderr
    assert "PrivateData=jobs,usage,cloud" in out.stdout
    assert "SlurmctldParameters=enable_configless,reboot_from_controller," \
           "idle_on_node_suspend" in out.stdout

    # slurmscale's lines as the old `>>` left them: its own values only, last
    text = c.slurmscale_conf.read_text()
    text = re.sub(r"(?m)^PrivateData=.*$", "PrivateData=cloud", text)
    text = re.sub(r"(?m)^GresTypes=.*$", "GresTypes=gpu", text)
    c.slurmscale_conf.write_text(text)
    c.stop_slurmctld()
    c.start_slurmctld()
    assert _running(c)["PrivateData"] == {"cloud"}  # what the site saw
    chk = c.cli("check", "--json")
    assert chk.returncode == 1, chk.stdout + chk.stderr
    lost = [p["message"] for p in json.loads(chk.stdout)["problems"]
            if p["code"] == "site_value_lost"]
    assert len(lost) == 2, chk.stdout
    assert lost[0].startswith("PrivateData runs as cloud, without the site's own jobs,usage")
    assert lost[1].startswith("GresTypes runs as gpu, without the site's own mps")
