"""`check` holds Slurm's node lines to the pool's instance type: a pool moved to another type
without `slurm-conf` rendered again (the issue's p4d.24xlarge under p5 lines) is an error
naming the node, the field and the value the type gives; lines that agree, and fields the
render leaves to Slurm (no shape, none pinned), are not."""

from __future__ import annotations

from slurmscale.check import SlurmView
from slurmscale.check_node_lines import check_node_lines, gres_gpus
from slurmscale.config_file import parse_config
from slurmscale.model import InstanceShape
from tests.unit.conftest import base_config

P5 = InstanceShape("p5.48xlarge", vcpus=192, memory_mib=2097152, gpus=8)
P4D = InstanceShape("p4d.24xlarge", vcpus=96, memory_mib=1179648, gpus=8)


def _view(sizes: dict[str, tuple[str, str, str]]) -> SlurmView:
    return SlurmView({}, set(), {n: "IDLE+CLOUD+POWERED_DOWN" for n in sizes}, sizes)


def test_gres_counts_the_gpus_however_scontrol_prints_them() -> None:
    assert gres_gpus("gpu:8") == 8
    assert gres_gpus("gpu:h100:8(S:0-1)") == 8
    assert gres_gpus("gpu:a:4,gpu:b:4") == 8
    assert gres_gpus("(null)") == 0
    assert gres_gpus("mps:100,gpu:2") == 2


def test_a_pool_moved_to_another_type_without_new_node_lines_is_an_error() -> None:
    d = base_config()
    d["pools"] = d["pools"][:1]
    d["pools"][0]["instance_types"] = ["p4d.24xlarge"]
    cfg = parse_config(d)
    p5_lines = {f"spot-{i}": ("192", str(P5.schedulable_memory_mb), "gpu:8")
                for i in range(1, 9)}
    (problem,) = check_node_lines(cfg, _view(p5_lines), {"p4d.24xlarge": P4D})
    assert problem.severity == "error" and problem.code == "node_line"
    assert "spot-1 has CPUs 192 (the pool's type gives 96)" in problem.message
    assert f"RealMemory {P5.schedulable_memory_mb} (the pool's type gives " \
           f"{P4D.schedulable_memory_mb})" in problem.message
    assert "8 nodes differ" in problem.message
    p4d_lines = {n: ("96", str(P4D.schedulable_memory_mb), "gpu:8") for n in p5_lines}
    assert check_node_lines(cfg, _view(p4d_lines), {"p4d.24xlarge": P4D}) == []
    fewer_gpus = {**p4d_lines, "spot-3": ("96", str(P4D.schedulable_memory_mb), "gpu:4")}
    (problem,) = check_node_lines(cfg, _view(fewer_gpus), {"p4d.24xlarge": P4D})
    assert "spot-3 has GPUs 4 (the pool's type gives 8)" in problem.message


def test_pinned_sizes_are_compared_and_unknown_ones_are_not() -> None:
    d = base_config()
    d["pools"] = d["pools"][:1]
    d["pools"][0].update(cpus_per_node=2, real_memory_mb=1024)
    cfg = parse_config(d)
    lines = {f"spot-{i}": ("2", "1024", "gpu:8") for i in range(1, 9)}
    assert check_node_lines(cfg, _view(lines), "EC2 unreadable") == []
    lines["spot-8"] = ("4", "1024", "gpu:8")
    assert [p.code for p in check_node_lines(cfg, _view(lines), {})] == ["node_line"]
    # not pinned and no shape: the render leaves CPUs and memory to Slurm, nothing to hold
    d["pools"][0].pop("cpus_per_node")
    d["pools"][0].pop("real_memory_mb")
    assert check_node_lines(parse_config(d), _view(lines), "EC2 unreadable") == []
