"""The instance agent: the local cluster's stand-in for EC2's hypervisor. It only powers
instances on and off; what runs "on" an instance is what runs on a real one.

Power on: once an instance of this cluster is `running` in moto for the boot delay, the
agent starts that instance's boot (`boot(instance_id)`: the local cluster runs slurmscale's
node bootstrap with the instance's own metadata endpoint, which learns its node from its tag
and starts slurmd, or reports its failure). Power off: when the instance is terminated, the
agent ends what its boot started. It never reads the node tag to decide anything: it talks
only to the moto endpoint on loopback, never to an instance's fake address.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE

log = logging.getLogger(__name__)


@dataclass
class _Booted:
    instance_id: str
    proc: subprocess.Popen[bytes]
    at: float  # time.time() of power-on


class InstanceAgent:
    def __init__(self, ec2_client, cluster: str, boot_delay: float,  # type: ignore[no-untyped-def]
                 boot: Callable[[str], subprocess.Popen[bytes]],
                 poll_interval: float = 0.5,
                 on_halt: Callable[[str], None] | None = None,
                 clock_ahead_s: float = 0.0) -> None:
        self.ec2 = ec2_client
        self.cluster = cluster
        self.boot_delay = boot_delay
        self.boot = boot
        self.poll_interval = poll_interval
        self.booted: dict[str, _Booted] = {}  # instance id -> its boot
        self.node_of: dict[str, str] = {}  # instance id -> its node tag, as last read
        self.boot_log: list[tuple[str, str, float]] = []  # (node, instance, power-on time)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # (a reboot from a test, against the agent's steps)
        self._thread = threading.Thread(target=self._run, name="instance-agent", daemon=True)
        self.errors = 0
        # after an instance powers off: end what else ran "on" its node (by node name)
        self.on_halt = on_halt
        # EC2's clock against this host's (its launch times are in EC2's)
        self.clock_ahead = timedelta(seconds=clock_ahead_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for iid in list(self.booted):
            self._halt(iid)

    def _instances(self) -> list[dict]:
        out = []
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}])
        for page in pages:
            for res in page["Reservations"]:
                out.extend(res["Instances"])
        return out

    def _halt(self, iid: str) -> None:
        b = self.booted.pop(iid, None)
        if b is None:
            return
        if b.proc.poll() is None:
            b.proc.terminate()
            try:
                b.proc.wait(15)
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait(5)
        node = self.node_of.get(iid)
        # (not while another instance runs as that node: a replaced boot's successor)
        if node and self.on_halt is not None and not any(
                self.node_of.get(other) == node for other in self.booted):
            self.on_halt(node)
        log.info("agent: %s (%s) powered off", iid, node or "no node")

    def instance_of(self, node: str) -> str:
        (iid,) = [i for i, n in self.node_of.items() if n == node and i in self.booted]
        return iid

    def crash(self, node: str) -> int:
        """The node's hardware fails under it: what its boot started (slurmd) is killed
        (SIGKILL) while its instance keeps running, and it is not restarted. Returns the
        killed process's PID."""
        b = self.booted[self.instance_of(node)]
        b.proc.kill()
        b.proc.wait(10)
        log.info("agent: %s (%s) slurmd killed", node, b.instance_id)
        return b.proc.pid

    def reboot(self, node: str, down_s: float = 0.0) -> str:
        """The node's instance reboots (a driver update, `sudo reboot`, a stop/start's
        second half): what its boot started stops, and `down_s` later its boot runs again on
        the same instance (same id, tags and metadata), as the user data's
        slurmscale-node-init.service runs the bootstrap at every boot after the first.
        Returns the instance id."""
        with self._lock:
            iid = self.instance_of(node)
            b = self.booted[iid]
            if b.proc.poll() is None:
                b.proc.terminate()
                b.proc.wait(15)
            if self.on_halt is not None:
                self.on_halt(node)
            log.info("agent: %s (%s) rebooting", iid, node)
            time.sleep(down_s)
            self.booted[iid] = _Booted(iid, self.boot(iid), time.time())
            self.boot_log.append((node, iid, time.time()))
            return iid

    def step(self, now: datetime) -> None:
        with self._lock:
            self._step(now)

    def _step(self, now: datetime) -> None:
        running: dict[str, datetime] = {}
        for inst in self._instances():
            iid = inst["InstanceId"]
            node = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}.get(TAG_NODE)
            if node:
                self.node_of[iid] = node
            if inst["State"]["Name"] == "running":
                launched = inst.get("LaunchTime") or now
                if launched.tzinfo is None:
                    launched = launched.replace(tzinfo=UTC)
                running[iid] = launched
        for iid in list(self.booted):
            if iid not in running:
                self._halt(iid)
        for iid, launched in running.items():
            if iid in self.booted:
                continue
            if (now - launched).total_seconds() >= self.boot_delay:
                self.booted[iid] = _Booted(iid, self.boot(iid), time.time())
                self.boot_log.append((self.node_of.get(iid, ""), iid, time.time()))
                log.info("agent: %s powered on", iid)

    def boots(self) -> list[tuple[str, str, float]]:
        """(node, instance, power-on time) of every instance powered on, the node as its tag
        says now (a boot may start before the daemon has tagged its instance)."""
        return [(self.node_of.get(iid, node), iid, t) for node, iid, t in self.boot_log]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step(datetime.now(UTC) + self.clock_ahead)
            except Exception:  # noqa: BLE001 - keep the agent alive; count and log
                self.errors += 1
                log.exception("agent step failed")
            self._stop.wait(self.poll_interval)
