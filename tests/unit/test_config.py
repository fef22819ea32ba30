import copy

import pytest
import yaml

from slurmscale.config import ConfigError
from slurmscale.config_file import load_config, parse_config
from tests.unit.conftest import base_config


def test_a_valid_config_loads_with_defaults(tmp_path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(base_config()))
    cfg = load_config(p)
    assert cfg.pool_of("spot-8").name == "gpu-spot"
    assert cfg.pool_of("spot-9") is None and cfg.pool_of("spot-01") is None
    assert cfg.pool_of("od-1").capacity_type.value == "on-demand"
    assert cfg.daemon.batch_window_seconds == 2.0
    assert cfg.pools[0].launch_template.version == "3"


def _err(data) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as e:
        parse_config(data, "x.yaml")
    return str(e.value)


def _pool_edit(**kw):  # type: ignore[no-untyped-def]
    d = copy.deepcopy(base_config())
    d["pools"][0].update(kw)
    return d


@pytest.mark.parametrize("data, needles", [
    (_pool_edit(launch_template={"name": "gpu", "version": "$Latest"}),
     ["pools.0.launch_template.version", "$Latest"]),
    (_pool_edit(min_nodes=9), ["pools.0", "min_nodes (9)", "max_nodes (8)"]),
    (_pool_edit(max_nodes=0), ["pools.0.max_nodes", "0"]),
    (_pool_edit(capacity_type="reserved"), ["pools.0.capacity_type", "reserved"]),
    (_pool_edit(instance_types=["P5 48xl"]), ["pools.0.instance_types", "P5 48xl"]),
    (_pool_edit(launch_template={"version": "1"}), ["launch_template", "exactly one"]),
    (_pool_edit(node_prefix="Spot_"), ["pools.0.node_prefix", "Spot_"]),
    (_pool_edit(subnet="subnet-1"), ["pools.0.subnet", "unknown key"]),
    ({**base_config(), "cluster_name": "bad name"}, ["cluster_name", "bad name"]),
    ({**base_config(), "pools": []}, ["pools", "at least 1"]),
    ({"pools": base_config()["pools"]}, ["cluster_name", "required"]),
    ({**base_config(), "node_address": "public-ip"}, ["node_address", "public-ip"]),
    # (these three ended in a traceback as the daemon bound its socket)
    ({**base_config(), "socket_path": ""}, ["socket_path", "''", "absolute path"]),
    ({**base_config(), "socket_path": "/"}, ["socket_path", "'/'", "absolute path"]),
    ({**base_config(), "socket_path": "."}, ["socket_path", "'.'", "absolute path"]),
    ({**base_config(), "socket_path": "/run/" + "s" * 120}, ["socket_path", "107 bytes"]),
    ({**base_config(), "daemon": {"tick_seconds": -1}}, ["daemon.tick_seconds", "-1"]),
    ({**base_config(), "daemon": {"leak_grace_s": float("nan")}},
     ["daemon.leak_grace_s", "nan"]),
    # (each of these was accepted before)
    ({**base_config(), "capacity": {"unavailable_ttl_s": 5000, "max_unavailable_ttl_s": 100}},
     ["capacity", "unavailable_ttl_s (5000) is above max_unavailable_ttl_s (100)"]),
    (_pool_edit(gpus_per_node=0, gpu_type="h100"), ["pools.0.gpus_per_node", "0"]),
    # (each of these was accepted, and broke the daemon or Slurm after)
    (_pool_edit(gpus_per_node=0), ["pools.0.gpus_per_node", "greater than or equal to 1"]),
    (_pool_edit(real_memory_mb=True), ["pools.0", "real_memory_mb: True is a boolean"]),
    (_pool_edit(cpus_per_node=True), ["pools.0", "cpus_per_node: True is a boolean"]),
    ({**base_config(), "daemon": {"leak_grace_s": 1e308}},
     ["daemon", "leak_grace_s: 1e+308 seconds is longer than a year"]),
    (_pool_edit(policy={"max_idle_s": 10**9}), ["pools.0.policy", "max_idle_s: 1000000000"]),
    ({**base_config(), "aws": {"endpoint_url": "not a url"}},
     ["aws.endpoint_url", "'not a url' is not an http(s) URL"]),
    ({**base_config(), "aws": {"sqs_endpoint_url": "http://127.0.0.1:port"}},
     ["aws.sqs_endpoint_url", "is not an http(s) URL"]),
    ({**base_config(), "pools": [base_config()["pools"][0],
                                 {**base_config()["pools"][1], "node_prefix": "spot-a-"}]},
     ["node_prefix 'spot-' is the start of node_prefix 'spot-a-'"]),
    ({**base_config(), "metrics": {"port": 9000, "address": "localhost:9"}},
     ["metrics.address", "'localhost:9' is not an IP address"]),
    ({**base_config(), "aws": {"region": "us east"}}, ["aws.region", "us east"]),
    ({**base_config(), "spool_dir": "spool"}, ["spool_dir", "'spool' is not an absolute path"]),
    ({**base_config(), "hooks_dir": "hooks"}, ["hooks_dir", "'hooks' is not an absolute"]),
    ({**base_config(), "pools": [base_config()["pools"][0],
                                 {**base_config()["pools"][1], "partition": "gpu-spot"}]},
     ["two pools share partition 'gpu-spot'"]),
])
def test_errors_name_the_bad_key_and_value(data, needles) -> None:  # type: ignore[no-untyped-def]
    msg = _err(data)
    assert msg.startswith("invalid config x.yaml")
    for n in needles:
        assert n in msg, (n, msg)


def test_duplicate_pools_are_refused() -> None:
    d = base_config()
    d["pools"][1]["node_prefix"] = "spot-"
    assert "two pools share node_prefix 'spot-'" in _err(d)


def test_unreadable_or_non_yaml_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("pools: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(p)


def test_config_path_from_environment(tmp_path, monkeypatch) -> None:
    p = tmp_path / "env.yaml"
    p.write_text(yaml.safe_dump(base_config(cluster_name="fromenv")))
    monkeypatch.setenv("SLURMSCALE_CONFIG", str(p))
    assert load_config().cluster_name == "fromenv"


def test_suspend_time_must_outlast_the_policys_idle_limit() -> None:
    msg = _err(base_config(power_saving={"suspend_time": 600}))
    assert "power_saving.suspend_time (600)" in msg and "max_idle_s (600)" in msg
    assert "'gpu-spot'" in msg and "{'cluster_name'" not in msg, "names values, not the file"
    msg = _err(_pool_edit(policy={"min_idle_s": 900, "max_idle_s": 300}))
    assert "pools.0.policy" in msg and "min_idle_s (900)" in msg


BOMB = """cluster_name: c
a: &a [x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
j: &j [*i, *i, *i, *i, *i, *i, *i, *i, *i]
pools: *j
"""


@pytest.mark.parametrize(("content", "words"), [
    (BOMB.encode(), "expands"), (b"cluster_name: \xff\xfe", "not UTF-8"),
    (b"a: " + b"[" * 50000, "not valid YAML|nests too deeply"),
    (b"#" * (2 << 20), "larger than")])
def test_a_hostile_config_is_refused_not_expanded(tmp_path, content: bytes,
                                                            words: str) -> None:
    """Before: the alias bomb hung every command (the resume hook too) for over a minute in
    validation; non-UTF-8 text ended in a traceback."""
    import time

    p = tmp_path / "c.yaml"
    p.write_bytes(content)
    p.chmod(0o644)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=words):
        load_config(p)
    # a hang guard, not a speed test (the bomb hung for over a minute; each case takes
    # milliseconds to about half a second here)
    assert time.monotonic() - t0 < 10.0


def test_a_key_given_twice_is_refused_with_its_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """YAML forbids it and PyYAML kept the last silently: a pool's second max_nodes won."""
    p = tmp_path / "c.yaml"
    text = yaml.safe_dump(base_config(), sort_keys=False)
    p.write_text(text.replace("max_nodes: 8\n", "max_nodes: 8\n  max_nodes: 800\n", 1))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    line = p.read_text().splitlines().index("  max_nodes: 800") + 1
    assert f"line {line}: key 'max_nodes' is given twice" in str(e.value)
    p.write_text(text)
    assert load_config(p).pools[0].max_nodes == 8


def test_booleans_stay_allowed_where_booleans_are_meant() -> None:
    d = base_config(slurm={"configless": True}, reservations={"enabled": False})
    d["pools"][0]["efa"] = True
    cfg = parse_config(d)
    assert cfg.slurm.configless and cfg.pools[0].efa and not cfg.reservations.enabled


def test_a_daemon_whose_log_file_is_a_directory_says_so_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Before: a raw IsADirectoryError traceback, exit 1."""
    import os

    from click.testing import CliRunner

    from slurmscale.cli import cli

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(base_config(
        log_file=str(tmp_path), store_url=f"sqlite:///{tmp_path / 's.db'}",
        socket_path=str(tmp_path / "sock"), spool_dir=str(tmp_path / "spool"))))
    os.chmod(p, 0o644)
    r = CliRunner().invoke(cli, ["--config", str(p), "daemon"])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == f"slurmscale: log_file {tmp_path}: Is a directory"
