from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.slurm.kv import (
    NODE_KEYS,
    SQUEUE_FORMAT,
    gpus_from_tres,
    parse_node_line,
    parse_oneliner,
    parse_reservations,
    parse_sprio,
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
    text = ("12|gpu-spot,gpu-od|4|gres:gpu:8|1-00:00:00|2026-11-29T10:00:00|Resources|"
            "4294901|alice|PENDING|(null)|(null)|2026-11-30T10:00:00|(null)|2026-11-30T08:00:00|\n"
            "13|gpu-spot|1|gres/gpu:h100:4|UNLIMITED|2026-11-29T10:00:01|None|10|bob|"
            "RUNNING|proj-a|slurmscale-gang-13|2026-11-29T14:00:00|spot-[3-4]|"
            "2026-11-29T10:00:00|\n")
    a, b = parse_squeue_fixed(text)
    assert (a.job_id, a.partitions, a.num_nodes, a.gpus_per_node, a.time_limit_s) == (
        "12", ("gpu-spot", "gpu-od"), 4, 8, 86400)
    assert (b.gpus_per_node, b.time_limit_s, b.reason, b.priority) == (4, None, "None", 10)
    assert (a.account, a.reservation, b.account, b.reservation) == (
        "", "", "proj-a", "slurmscale-gang-13")
    assert (a.end_time, a.nodelist) == ("", ""), "a pending job's estimates are not kept"
    assert (b.end_time, b.nodelist) == ("2026-11-29T14:00:00", "spot-[3-4]")
    assert (a.start_time, b.start_time) == ("", "2026-11-29T10:00:00")
    assert (a.expected_start, b.expected_start) == ("2026-11-30T08:00:00", ""), \
        "a pending job's StartTime is backfill's expected start"



def test_an_expedited_requeue_waiting_to_restart_is_a_pending_job() -> None:
    """25.11+: squeue prints a --requeue=expedite job between its node's failure and its
    restart EXPEDITING (26.05, measured); it is demand like any pending job."""
    text = ("7|gpu-spot|2|gres/gpu:8|UNLIMITED|2026-11-29T10:00:00|NodeDown|4294901|alice|"
            "EXPEDITING|(null)|(null)|2026-11-30T10:00:00|spot-[1-2]|2026-11-30T08:00:00|\n")
    (j,) = parse_squeue_fixed(text)
    assert (j.state, j.nodelist, j.expected_start) == ("PENDING", "", "2026-11-30T08:00:00")

def test_reservations_parse_with_flags_and_node_lists() -> None:
    text = ("ReservationName=slurmscale-gang-7 StartTime=2026-11-29T12:43:11 "
            "EndTime=2026-11-29T12:53:11 Duration=00:10:00 Nodes=g-[1-2] NodeCnt=2 CoreCnt=4 "
            "Features=(null) PartitionName=(null) Flags=IGNORE_JOBS,SPEC_NODES,"
            "NO_HOLD_JOBS_AFTER_END TRES=cpu=4 Users=root Groups=(null) Accounts=(null) "
            "Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n")
    (r,) = parse_reservations(text)
    assert (r.name, r.nodes, r.users, r.accounts, r.state) == (
        "slurmscale-gang-7", ("g-1", "g-2"), ("root",), (), "ACTIVE")
    assert "NO_HOLD_JOBS_AFTER_END" in r.flags
    assert parse_reservations("No reservations in the system\n") == []


def test_time_limits_and_gres() -> None:
    assert parse_time_limit("30") == 1800
    assert parse_time_limit("1:30") == 90
    assert parse_time_limit("02:00:00") == 7200
    assert parse_time_limit("2-01:00:00") == 176400
    assert gpus_from_tres("") == 0
    assert gpus_from_tres("gres:gpu:a100:2") == 2


def test_one_line_slurmscale_cannot_read_is_skipped_not_the_whole_read() -> None:
    """Before: one short or garbled squeue line (or one reservation with a node list it cannot
    expand) raised, and the whole capacity pass failed every time."""
    good = ("12|gpu-spot|4|gres:gpu:8|1-00:00:00|2026-11-29T10:00:00|Resources|"
            "4294901|alice|PENDING|(null)|(null)|N/A|(null)|N/A|")
    text = "\n".join([good, "13|gpu-spot|truncated", good.replace("1-00:00:00", "1-xx:00"),
                      good.replace("12|", "14|", 1)]) + "\n"
    assert [j.job_id for j in parse_squeue_fixed(text)] == ["12", "14"]
    res = ("ReservationName=other StartTime=2026-11-29T12:43:11 EndTime=2026-11-29T12:53:11 "
           "Nodes=g-[1-\uff12] Users=root\n"
           "ReservationName=mine StartTime=2026-11-29T12:43:11 EndTime=2026-11-29T12:53:11 "
           "Nodes=g-[1-2] Users=root\n")
    assert [r.name for r in parse_reservations(res)] == ["mine"]


def test_sprio_fixed_fields_and_a_line_it_cannot_read() -> None:
    """As Slurm 22.05 prints `sprio -h -o SPRIO_FORMAT` (whole numbers, no padding)."""
    text = ("1|gpu-spot|150|0|0|150|0|0|\n3|gpu-spot|75|0|0|75|0|0|\n"
            "3|gpu-od|75|0|0|75|0|0|\n7|gpu-od|nan|0|0|75|0|0|\n8|gpu|12|\n"
            "9|gpu|1e400|0|0|0|0|0|\n")
    rows = parse_sprio(text)
    assert [(r.job_id, r.partition, r.priority, r.job_size) for r in rows] == [
        ("1", "gpu-spot", 150.0, 150.0), ("3", "gpu-spot", 75.0, 75.0),
        ("3", "gpu-od", 75.0, 75.0)]
    assert parse_sprio("") == []


# a real 22.05 line (a powered-up node); parse_node_line must read it as parse_oneliner does
NODE_22_05 = ("NodeName=od-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=2 CPUEfctv=2 CPUTot=2 "
              "CPULoad=0.05 AvailableFeatures=on-demand,p5.48xlarge ActiveFeatures=on-demand,"
              "p5.48xlarge Gres=gpu:8 NodeAddr=127.0.0.1 NodeHostName=localhost Port=19691  "
              "RealMemory=1 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1 State={state} "
              "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions={parts}  "
              "BootTime=2026-11-30T12:00:00 SlurmdStartTime=2026-11-30T12:00:01 "
              "LastBusyTime={busy} CfgTRES=cpu=2,mem=1M,billing=2 AllocTRES={tres} "
              "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
              "ExtSensorsTemp=n/s{reason}")


@settings(max_examples=300)
@given(st.sampled_from(["IDLE+CLOUD", "ALLOCATED+CLOUD", "IDLE+CLOUD+POWERED_DOWN",
                        "DOWN+CLOUD+NOT_RESPONDING", "MIXED+DRAIN"]),
       st.sampled_from(["gpu-od", "gpu-od,all", ""]),
       st.sampled_from(["Unknown", "2026-11-30T12:01:02", "None"]),
       st.sampled_from(["", "cpu=2,mem=1M,gres/gpu=8"]),
       st.none() | st.text(st.sampled_from("abcXYZ =:[]@-_/0123"), min_size=1, max_size=40))
def test_the_lean_node_parser_reads_what_the_whole_parser_reads(state, parts, busy, tres,
                                                                 reason) -> None:
    line = NODE_22_05.format(state=state, parts=parts, busy=busy, tres=tres,
                             reason="" if reason is None else f" Reason={reason} [root@2026-11"
                             "-30T12:00:00]")
    whole, lean = parse_oneliner(line), parse_node_line(line)
    assert set(lean) <= set(NODE_KEYS)
    if reason is None or not any(f"{k}=" in reason for k in NODE_KEYS):
        assert lean == {k: whole[k] for k in NODE_KEYS if k in whole}
    assert (lean["NodeName"], lean["State"], lean["Partitions"]) == ("od-1", state, parts)


def test_a_reason_quoting_a_key_cannot_shadow_the_real_one() -> None:
    line = NODE_22_05.format(state="IDLE+CLOUD+DRAIN", parts="gpu-od", busy="Unknown", tres="",
                             reason=" Reason=was State=DOWN before [root@2026-11-30T12:00:00]")
    assert parse_node_line(line)["State"] == "IDLE+CLOUD+DRAIN"
    assert parse_node_line(line)["Reason"].startswith("was")


def test_squeue_parsed_as_it_streams_equals_the_whole_text() -> None:
    """run_parsed hands the parser lines with their newlines, as the pipe gives them."""
    import io

    from tests.benchmarks.canned_slurm import cluster_text

    text = cluster_text(500, 50, 200, 1_790_000_000.0)["jobs"]
    whole = parse_squeue_fixed(text)
    assert len(whole) > 500 and any(j.array_tasks > 1 for j in whole)
    assert parse_squeue_fixed(io.StringIO(text)) == whole


def test_run_parsed_reports_what_run_reports(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A failing command's status and stderr, a command past its timeout, a missing one:
    SlurmError, as `run` raises; what was parsed is dropped. A parser that stops early does
    not leave the command blocked on a full pipe."""
    import os

    import pytest

    from slurmscale.config import SlurmSettings
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError

    def tool(name: str, body: str) -> None:
        (tmp_path / name).write_text("#!/bin/sh\n" + body)
        os.chmod(tmp_path / name, 0o755)

    tool("ok", "seq 1 200000\n")
    tool("bad", "echo 1; echo 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
    tool("slow", "echo 1; exec sleep 30\n")
    cli = SlurmCLI(SlurmSettings(bin_dir=str(tmp_path), timeout_s=1.0))
    assert cli.run_parsed(lambda lines: sum(1 for _ in lines), "ok") == 200000
    assert cli.run_parsed(lambda lines: next(iter(lines)), "ok") == "1\n"
    with pytest.raises(SlurmError) as e:
        cli.run_parsed(list, "bad")
    assert e.value.returncode == 1 and "Unable to contact" in str(e.value)
    with pytest.raises(SlurmError) as e:
        cli.run_parsed(list, "slow")
    assert e.value.returncode is None
    with pytest.raises(SlurmError) as e:
        cli.run_parsed(list, "missing")
    assert e.value.returncode == 127
