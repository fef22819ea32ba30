from pathlib import Path

from slurmscale.config_file import load_config
from slurmscale.slurmconf import render_gres_conf, render_slurm_conf

D = Path(__file__).resolve().parents[2] / "slurm_conf"


def test_the_committed_fragments_are_what_slurm_conf_renders_from_the_example() -> None:
    cfg = load_config(D / "slurmscale.example.yaml")
    assert (D / "slurm.conf.fragment").read_text() == render_slurm_conf(cfg)
    assert (D / "gres.conf.fragment").read_text() == render_gres_conf(cfg)


def test_the_capacity_example_renders_its_fragment() -> None:
    cfg = load_config(D / "capacity.example.yaml")
    assert (D / "capacity.slurm.conf.fragment").read_text() == render_slurm_conf(cfg)
    assert "PartitionName=gpu-block Nodes=cb-p5-[1-16]" in render_slurm_conf(cfg)
