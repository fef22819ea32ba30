"""The simulator's EC2 and the real EC2 adapter pass the same contract
(`tests/support/ec2_contract.py`). The real side is `EC2Cloud` on an in-process moto server
behind the fault-injecting proxy: no root, loopback only."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import boto3
import pytest

from slurmscale.cloud.ec2 import EC2Cloud
from slurmscale.cloud.protocol import CloudProvider
from slurmscale.config import AwsSettings, CapacityType, LaunchTemplate, Pool
from slurmscale.model import CapacityReservation, InstanceHealth, NetworkPlace
from slurmscale.sim.ec2_adapter import SimEc2
from tests.support.ec2_capacity import Reservation
from tests.support.ec2_contract import CHECKS, Ec2Side
from tests.support.ec2_proxy import EC2Proxy, Fault
from tests.support.fakes import FakeCloud


def _pool(capacity: CapacityType, template: str, subnet: str) -> Pool:
    return Pool(name=f"gpu-{capacity.value}", partition="gpu", node_prefix="gpu-",
                max_nodes=8, gpus_per_node=8, instance_types=["p5.48xlarge"],
                capacity_type=capacity, launch_template=LaunchTemplate(name=template,
                                                                      version="1"),
                subnets=[subnet])


class SimSide:
    def __init__(self) -> None:
        self.ec2 = SimEc2()
        self.cloud: CloudProvider = self.ec2

    def pool(self, capacity: CapacityType) -> Pool:
        return _pool(capacity, "sim", "subnet-sim")

    def short(self, market: str, keep: int) -> None:
        self.ec2.limit[market] = self.ec2._live[market] + keep

    def reclaim(self, instance_id: str) -> None:
        self.ec2.reclaim(instance_id)

    def add_reservation(self, rid: str, instance_type: str, total: int) -> None:
        self.ec2.reservations[rid] = CapacityReservation(rid, instance_type, "us-east-1a",
                                                         total, total, "active")

    def add_block(self, rid: str, instance_type: str, total: int, start: float, end: float
                  ) -> None:
        # (its state follows its window at each read: the one given here is replaced)
        self.ec2.reservations[rid] = CapacityReservation(
            rid, instance_type, "us-east-1a", total, total, "scheduled", "capacity-block",
            start, end)

    def impair(self, instance_id: str) -> None:
        self.ec2.instances[instance_id].impaired = True

    def lay_out(self, instance_id: str, node: str, layers: tuple[str, ...]) -> None:
        self.ec2.topology[instance_id] = NetworkPlace(layers)

    def place_reservation(self, rid: str, place: NetworkPlace) -> None:
        self.ec2.reservation_places[rid] = place


class FakeSide:
    """The unit tests' `FakeCloud`, held to the same contract."""

    def __init__(self) -> None:
        self.fake = FakeCloud()
        self.cloud: CloudProvider = self.fake
        self.left: dict[str, int] = {}

    def pool(self, capacity: CapacityType) -> Pool:
        return _pool(capacity, "fake", "subnet-1")

    def short(self, market: str, keep: int) -> None:
        self.fake.give = keep

    def reclaim(self, instance_id: str) -> None:
        self.fake.reclaim(instance_id)

    def add_reservation(self, rid: str, instance_type: str, total: int) -> None:
        self.fake.reservations[rid] = CapacityReservation(rid, instance_type, "us-east-1a",
                                                          total, total, "active")

    def add_block(self, rid: str, instance_type: str, total: int, start: float, end: float
                  ) -> None:
        # (FakeCloud's reservations keep the state a test gives them: the window's, now)
        state = "scheduled" if time.time() < start else "active"
        self.fake.reservations[rid] = CapacityReservation(
            rid, instance_type, "us-east-1a", total, total, state, "capacity-block", start,
            end)

    def impair(self, instance_id: str) -> None:
        self.fake.health[instance_id] = InstanceHealth(instance_id, instance_status="impaired")

    def lay_out(self, instance_id: str, node: str, layers: tuple[str, ...]) -> None:
        self.fake.topology[instance_id] = NetworkPlace(layers)

    def place_reservation(self, rid: str, place: NetworkPlace) -> None:
        self.fake.reservation_places[rid] = place


class MotoSide:
    def __init__(self, moto_url: str) -> None:
        self.proxy = EC2Proxy(upstream=moto_url).start()
        self.ec2 = ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_url)
        vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
        self.subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.1.0/24",
                                        AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
        ec2.create_launch_template(LaunchTemplateName="contract-gpu", LaunchTemplateData={
            "ImageId": "ami-0a1b2c3d4e5f60718", "InstanceType": "p5.48xlarge"})
        self.cloud = EC2Cloud(AwsSettings(endpoint_url=self.proxy.url, max_attempts=1))

    def pool(self, capacity: CapacityType) -> Pool:
        return _pool(capacity, "contract-gpu", self.subnet)

    def short(self, market: str, keep: int) -> None:
        self.proxy.faults.append(Fault("CreateFleet", "short", keep=keep,
                                       capacity_type=market))

    def reclaim(self, instance_id: str) -> None:
        self.ec2.terminate_instances(InstanceIds=[instance_id])  # (behind the proxy's back)
        self.proxy.reclaimed.add(instance_id)

    def add_reservation(self, rid: str, instance_type: str, total: int) -> None:
        self.proxy.capacity.add(Reservation(rid, instance_type, total))

    def add_block(self, rid: str, instance_type: str, total: int, start: float, end: float
                  ) -> None:
        self.proxy.capacity.add(Reservation(
            rid, instance_type, total, reservation_type="capacity-block",
            start=datetime.fromtimestamp(start, UTC), end=datetime.fromtimestamp(end, UTC)))

    def impair(self, instance_id: str) -> None:
        self.proxy.impaired.add(instance_id)

    def lay_out(self, instance_id: str, node: str, layers: tuple[str, ...]) -> None:
        self.proxy.capacity.topology_by_node[node] = layers  # (by its node tag, as EC2 would)

    def place_reservation(self, rid: str, place: NetworkPlace) -> None:
        r = self.proxy.capacity.reservations[rid]
        r.network_nodes, r.ultraserver = place.nodes, place.ultraserver


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture(params=["simulated", "fake", "moto"])
def side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[Ec2Side]:
    if request.param == "simulated":
        yield SimSide()
        return
    if request.param == "fake":
        yield FakeSide()
        return
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    url = request.getfixturevalue("moto_url")
    # one moto server for the module, emptied before each check (a template name is unique)
    urllib.request.urlopen(urllib.request.Request(url + "/moto-api/reset", method="POST"),
                           timeout=10)
    s = MotoSide(url)
    try:
        yield s
    finally:
        s.proxy.stop()


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_ec2_contract(side: Ec2Side, check: Callable[[Ec2Side], None]) -> None:
    check(side)
