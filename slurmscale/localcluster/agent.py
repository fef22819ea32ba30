"""The instance agent: what "the machine boots and runs slurmd" means in the local cluster.

When an EC2 instance tagged for node X is `running` (in moto), the agent waits the boot delay
and starts `slurmd -N X -b` (-b: report a fresh boot, or slurmctld keeps "waiting for boot");
when the instance is terminated, it stops that slurmd. It talks only to the moto endpoint on
loopback, never to an instance's fake address.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE

log = logging.getLogger(__name__)


@dataclass
class _Booted:
    instance_id: str
    proc: subprocess.Popen[bytes]


class InstanceAgent:
    def __init__(self, ec2_client, cluster: str, boot_delay: float,  # type: ignore[no-untyped-def]
                 start_slurmd: Callable[[str], subprocess.Popen[bytes]],
                 poll_interval: float = 0.5,
                 on_halt: Callable[[str], None] | None = None) -> None:
        self.ec2 = ec2_client
        self.cluster = cluster
        self.boot_delay = boot_delay
        self.start_slurmd = start_slurmd
        self.poll_interval = poll_interval
        self.booted: dict[str, _Booted] = {}
        self.boot_log: list[tuple[str, str, float]] = []  # (node, instance, unix time)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="instance-agent", daemon=True)
        self.errors = 0
        self.on_halt = on_halt  # after a node's slurmd stops: end what else ran "on" it

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for node in list(self.booted):
            self._halt(node)

    def _instances(self) -> list[dict]:
        out = []
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}])
        for page in pages:
            for res in page["Reservations"]:
                out.extend(res["Instances"])
        return out

    def _halt(self, node: str) -> None:
        b = self.booted.pop(node, None)
        if b is None:
            return
        if b.proc.poll() is None:
            b.proc.terminate()
            try:
                b.proc.wait(15)
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait(5)
        if self.on_halt is not None:
            self.on_halt(node)
        log.info("agent: %s (%s) shut down", node, b.instance_id)

    def crash(self, node: str) -> int:
        """The node's hardware fails under it: its slurmd is killed (SIGKILL) while its
        instance keeps running, and it is not restarted. Returns the killed slurmd's PID."""
        b = self.booted[node]
        b.proc.kill()
        b.proc.wait(10)
        log.info("agent: %s (%s) slurmd killed", node, b.instance_id)
        return b.proc.pid

    def step(self, now: datetime) -> None:
        running: dict[str, tuple[str, datetime]] = {}
        for inst in self._instances():
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
            node = tags.get(TAG_NODE)
            if node and inst["State"]["Name"] == "running":
                launched = inst.get("LaunchTime") or now
                if launched.tzinfo is None:
                    launched = launched.replace(tzinfo=UTC)
                running[node] = (inst["InstanceId"], launched)
        for node, b in list(self.booted.items()):
            if running.get(node, ("",))[0] != b.instance_id:
                self._halt(node)
        for node, (iid, launched) in running.items():
            if node in self.booted:
                continue
            if (now - launched).total_seconds() >= self.boot_delay:
                self.booted[node] = _Booted(iid, self.start_slurmd(node))
                self.boot_log.append((node, iid, time.time()))
                log.info("agent: %s booted on %s", node, iid)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step(datetime.now(UTC))
            except Exception:  # noqa: BLE001 - keep the agent alive; count and log
                self.errors += 1
                log.exception("agent step failed")
            self._stop.wait(self.poll_interval)
