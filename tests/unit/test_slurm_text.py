from slurmscale.slurm.kv import (
    SQUEUE_FORMAT,
    gpus_from_tres,
    parse_oneliner,
    parse_squeue_fixed,
    parse_time_limit,
)

NODE_LINE = ("NodeName=spot-3 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 "
             "AvailableFeatures=spot,p5.48xlarge Gres=gpu:8 NodeAddr=127.0.0.1 "
             "NodeHostName=spot-3 State=IDLE+CLOUD+POWERED_DOWN Partitions=gpu-spot "
             "Reason=slurmscale launch failed: InsufficientInstanceCapacity "
             "[root@2026-11-29T11:00:00]")


def test_scontrol_oneliner_keeps_values_with_spaces() -> None:
    kv = parse_oneliner(NODE_LINE)
    assert kv["State"] == "IDLE+CLOUD+POWERED_DOWN"
    assert kv["NodeAddr"] == "127.0.0.1"
    assert kv["Reason"].startswith("slurmscale launch failed: InsufficientInstanceCapacity")


def test_squeue_fixed_fields_for_22_05_and_24_11() -> None:
    assert SQUEUE_FORMAT.startswith("JobID:|,Partition:|,")
    text = ("12|gpu-spot,gpu-od|4|gres:gpu:8|N/A|1-00:00:00|2026-11-29T10:00:00|Resources|"
            "4294901|alice|PENDING|\n"
            "13|gpu-spot|1|gres/gpu:h100:4|N/A|UNLIMITED|2026-11-29T10:00:01|Priority|10|bob|"
            "PENDING|\n")
    a, b = parse_squeue_fixed(text)
    assert (a.job_id, a.partitions, a.num_nodes, a.gpus_per_node, a.time_limit_s) == (
        "12", ("gpu-spot", "gpu-od"), 4, 8, 86400)
    assert (b.gpus_per_node, b.time_limit_s, b.reason, b.priority) == (4, None, "Priority", 10)


def test_time_limits_and_gres() -> None:
    assert parse_time_limit("30") == 1800
    assert parse_time_limit("1:30") == 90
    assert parse_time_limit("02:00:00") == 7200
    assert parse_time_limit("2-01:00:00") == 176400
    assert gpus_from_tres("") == 0
    assert gpus_from_tres("gres:gpu:a100:2") == 2
