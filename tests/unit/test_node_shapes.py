"""Node sizes from EC2 (DescribeInstanceTypes), not typed by hand: `slurm-conf` renders CPUs
and RealMemory a pool leaves out from moto's instance types (AWS's own data) and says where
they came from, and refuses (exit 1) when EC2 cannot say; `check` holds every given size to
the type. Before: `CPUs=1` for a p5.48xlarge, and gpus_per_node 4 or cpus_per_node 256 on
it accepted; a hand-kept table of 19 types decided which types could share a pool."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmscale.check_launch import check_shapes
from slurmscale.config_file import parse_config
from slurmscale.model import InstanceShape
from slurmscale.slurmconf import render_slurm_conf
from tests.unit.conftest import base_config

P5 = InstanceShape("p5.48xlarge", vcpus=192, memory_mib=2097152, gpus=8, gpu_name="H100",
                   efa=True)
P4D = InstanceShape("p4d.24xlarge", vcpus=96, memory_mib=1179648, gpus=8, gpu_name="A100",
                    efa=True)


def _pools(**over: object) -> dict:
    d = base_config()
    d["pools"][0].update(over)
    return d


def test_sizes_left_out_are_rendered_from_ec2_and_said_so() -> None:
    cfg = parse_config(_pools())
    text = render_slurm_conf(cfg, shapes={"p5.48xlarge": P5})
    assert "NodeName=spot-[1-8] CPUs=192 RealMemory=1992294 Gres=gpu:8" in text
    assert ("# pool gpu-spot: CPUs 192 (its vCPUs) and RealMemory 1992294 (95 % of 2097152 "
            "MiB) from EC2's DescribeInstanceTypes for p5.48xlarge") in text
    given = parse_config(_pools(cpus_per_node=96, real_memory_mb=1000000))
    line = [ln for ln in render_slurm_conf(given, shapes={"p5.48xlarge": P5}).splitlines()
            if ln.startswith("NodeName=spot-")]
    assert len(line) == 1 and line[0].startswith("NodeName=spot-[1-8] CPUs=96 "
                                                 "RealMemory=1000000 Gres=gpu:8 ")
    assert "# pool gpu-spot:" not in render_slurm_conf(given, shapes={"p5.48xlarge": P5})


@pytest.mark.parametrize(("over", "code", "words"), [
    ({"gpus_per_node": 4}, "gpus_per_node", "gpus_per_node is 4, p5.48xlarge has 8 GPUs"),
    ({"cpus_per_node": 256}, "cpus_per_node", "cpus_per_node is 256, p5.48xlarge has 192"),
    ({"real_memory_mb": 3_000_000}, "real_memory_mb", "p5.48xlarge has 2097152 MiB"),
    ({"instance_types": ["p5.48xlarge", "p4d.24xlarge"]}, "instance_types_differ",
     "p5.48xlarge (8 GPUs, 192 vCPUs, 2097152 MiB) and p4d.24xlarge (8 GPUs, 96 vCPUs"),
    ({"instance_types": ["p5.48xlarge", "x9.huge"]}, "instance_type_unknown",
     "EC2 has no instance type x9.huge"),
])
def test_check_holds_each_size_to_the_instance_type(over: dict, code: str, words: str) -> None:
    cfg = parse_config(_pools(**over))
    got = [p for p in check_shapes(cfg, {"p5.48xlarge": P5, "p4d.24xlarge": P4D})
           if p.message.startswith("pool gpu-spot")]
    assert [(p.severity, p.code) for p in got] == [("error", code)], got
    assert words in got[0].message
    assert check_shapes(parse_config(_pools()), {"p5.48xlarge": P5}) == []


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _slurm_conf(tmp_path: Path, data: dict, keys: bool = True) -> subprocess.CompletedProcess:
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent",
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"})
    if keys:
        env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    return subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf),
                           "slurm-conf", "--slurm-release", "24.11"], capture_output=True,
                          text=True, timeout=60, env=env)


def test_slurm_conf_reads_the_sizes_from_moto_describe_instance_types(tmp_path: Path,
                                                                      moto_url: str) -> None:
    data = base_config(aws={"endpoint_url": moto_url, "max_attempts": 1})
    p = _slurm_conf(tmp_path, data)
    assert p.returncode == 0, p.stderr
    assert "NodeName=spot-[1-8] CPUs=192 RealMemory=1992294 Gres=gpu:8" in p.stdout
    # EC2 cannot say (no credentials): exit 1 naming the pool, never CPUs=1
    p = _slurm_conf(tmp_path, data, keys=False)
    assert p.returncode == 1 and p.stdout == "", p.stdout
    (line,) = p.stderr.strip().splitlines()
    assert "pool gpu-spot: cannot read instance type p5.48xlarge" in line
    assert "NoCredentialsError" in line and "cpus_per_node" in line
