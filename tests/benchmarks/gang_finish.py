"""Benchmark: from CreateFleet returning to the last node of a gang addressed — every instance
tagged with its node (CreateTags) and every NodeAddr set — for 64- and 1,000-node gangs, the
way the launcher does it now (tags in parallel, one `scontrol update` for the gang) against
the way it did (one CreateTags and one `scontrol update` per node, in turn), both measured in
this run on the same instances.

    .venv/bin/python -m tests.benchmarks.gang_finish [SIZES...]

EC2 is an in-process moto server on loopback (its CreateTags answers in about a millisecond;
AWS's take tens). Slurm is a canned `scontrol` on the config's bin_dir that records its
arguments and exits: the cost counted is starting one process per call, not slurmctld's RPC
(add that per call for a real controller). Medians of 5 runs.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import boto3

from slurmscale.cloud.ec2 import EC2Cloud
from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.config_file import parse_config
from slurmscale.daemon.context import PassContext, utcnow
from slurmscale.daemon.executor.effects import Tag
from slurmscale.daemon.passes.addresses import NodeAddresses
from slurmscale.model import LaunchedInstance
from slurmscale.slurm.cli_backend import SlurmCLI
from slurmscale.store.memory import MemoryStore
from tests.benchmarks.scratch import done_with
from tests.unit.conftest import base_config

RUNS = 5


def main() -> None:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # (moto's request log)
    sizes = [int(a) for a in sys.argv[1:]] or [64, 1000]
    tmp = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    log = tmp / "scontrol.log"
    scontrol = tmp / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    scontrol.chmod(0o755)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{server._server.server_port}"  # type: ignore[union-attr]
    try:
        d = base_config(aws={"endpoint_url": url}, slurm={"bin_dir": str(tmp)},
                        node_address="private-ip")
        d["pools"][0]["max_nodes"] = max(sizes)
        cfg = parse_config(d)
        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=url,
                           aws_access_key_id="x", aws_secret_access_key="x")
        image = ec2.describe_images()["Images"][0]["ImageId"]
        cloud, slurm = EC2Cloud(cfg.aws), SlurmCLI(cfg.slurm)
        ctx = PassContext(cfg, MemoryStore(), slurm, cloud, utcnow, lambda *a, **k: None)
        addresses = NodeAddresses(ctx)
        print(f"{'gang':>6} {'per node (before) s':>20} {'batched (now) s':>16} {'ratio':>7}"
              f" {'scontrol calls before/now':>26}")
        for n in sizes:
            made = []
            while len(made) < n:  # (moto's RunInstances takes up to 1,000 at once)
                k = min(1000, n - len(made))
                made += ec2.run_instances(ImageId=image, MinCount=k, MaxCount=k)["Instances"]
            pairs = [(f"spot-{i + 1}", LaunchedInstance(x["InstanceId"], "p5.48xlarge",
                                                        "spot", image, x["PrivateIpAddress"]))
                     for i, x in enumerate(made)]

            def before(pairs: list[tuple[str, LaunchedInstance]] = pairs) -> None:
                for node, inst in pairs:  # what finish_node did, once per node
                    ctx.effects.apply([Tag(inst.instance_id, node, {
                        TAG_NODE: node, "Name": f"{cfg.cluster_name}-{node}"})])
                    slurm.set_node_address(node, *ctx.address(node, inst))

            def now(pairs: list[tuple[str, LaunchedInstance]] = pairs) -> None:
                addresses.finish_nodes(pairs, address=True)

            times: dict[str, list[float]] = {"before": [], "now": []}
            calls: dict[str, int] = {}
            for _ in range(RUNS):
                for name, fn in (("before", before), ("now", now)):
                    log.write_text("")
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
                    calls[name] = len(log.read_text().splitlines())
            b, a = statistics.median(times["before"]), statistics.median(times["now"])
            print(f"{n:>6} {b:>20.2f} {a:>16.2f} {a / b:>7.2f} "
                  f"{calls['before']:>13}/{calls['now']}")
    finally:
        server.stop()
        done_with(tmp)


if __name__ == "__main__":
    main()
