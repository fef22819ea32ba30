"""Node names in Route 53 (`dns:`), against moto's Route 53 (a private hosted zone of a VPC):
the reconcile pass writes each launched node's A record in the pass that addresses it,
deletes it in the pass that releases it, never touches a name no pool has, and what a killed
daemon left undone (records never written after a fleet, a record of a terminated instance)
is done by the next daemon's first pass. Before: no node name resolved anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from slurmscale.cloud.protocol import CloudError
from slurmscale.cloud.route53 import DnsRecord, Route53Zone
from slurmscale.config import Config
from slurmscale.config_file import parse_config
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config
from tests.unit.test_reconcile import Clock, hook

DOMAIN = "train.internal"


@pytest.fixture(scope="module")
def moto_url(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield mp
    mp.undo()


def _client(url: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=url, region_name="us-east-1")


@pytest.fixture
def zone_cfg(moto_url: str, tmp_path: Any) -> tuple[Config, Any]:
    ec2, r53 = _client(moto_url, "ec2"), _client(moto_url, "route53")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    zone = r53.create_hosted_zone(
        Name=DOMAIN, CallerReference=str(tmp_path), HostedZoneConfig={"PrivateZone": True},
        VPC={"VPCRegion": "us-east-1", "VPCId": vpc})["HostedZone"]["Id"]
    cfg = parse_config(base_config(
        spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "sock"),
        hook_log_file=str(tmp_path / "hooks.log"),
        store_url=f"sqlite:///{tmp_path / 'state.db'}",
        aws={"route53_endpoint_url": moto_url, "max_attempts": 1},
        dns={"hosted_zone_id": zone, "domain": DOMAIN, "resync_s": 60}))
    return cfg, r53


def _records(r53: Any, cfg: Config) -> dict[str, str]:
    assert cfg.dns is not None
    got = r53.list_resource_record_sets(HostedZoneId=cfg.dns.hosted_zone_id)
    return {r["Name"]: r["ResourceRecords"][0]["Value"] for r in got["ResourceRecordSets"]
            if r["Type"] == "A"}


class FailingOnce:
    """The zone, except that the first change is cut off (the daemon killed between the
    fleet and the record write, as far as the zone can tell)."""

    def __init__(self, zone: Route53Zone) -> None:
        self.zone, self.left = zone, 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.zone, name)

    def change(self, upsert: dict[str, str], delete: dict[str, DnsRecord]) -> None:
        if self.left:
            self.left -= 1
            raise CloudError("EndpointConnectionError", "killed before the write")
        self.zone.change(upsert, delete)


def test_records_follow_the_instances_and_leave_other_names_alone(zone_cfg) -> None:  # type: ignore[no-untyped-def]
    cfg, r53 = zone_cfg
    assert cfg.dns is not None
    r53.change_resource_record_sets(HostedZoneId=cfg.dns.hosted_zone_id, ChangeBatch={
        "Changes": [{"Action": "UPSERT", "ResourceRecordSet": {
            "Name": f"head.{DOMAIN}.", "Type": "A", "TTL": 300,
            "ResourceRecords": [{"Value": "10.0.9.9"}]}}]})
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock,
                   dns_zone=Route53Zone(cfg.aws, cfg.dns))
    spool = Spool(cfg.spool_dir)
    try:
        hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2", "spot-3"]})
        r.tick()
        ips = {i.node: i.private_ip for i in store.active_instances()}
        assert _records(r53, cfg) == {f"head.{DOMAIN}.": "10.0.9.9",
                                      **{f"{n}.{DOMAIN}.": ip for n, ip in ips.items()}}
        assert slurm.addresses["spot-1"][0] == ips["spot-1"], "the name says what NodeAddr says"
        clock.now += timedelta(seconds=10)
        hook(spool, clock, RequestKind.SUSPEND, {0: ["spot-2"]})
        r.tick()
        assert set(_records(r53, cfg)) == {f"head.{DOMAIN}.", f"spot-1.{DOMAIN}.",
                                           f"spot-3.{DOMAIN}."}
        kinds = [e.kind for e in store.events()]
        assert kinds.count("dns_records_changed") == 2
        clock.now += timedelta(seconds=10)
        r.tick()  # nothing to change: no batch, no event
        assert [e.kind for e in store.events()].count("dns_records_changed") == 2
    finally:
        store.close()


def test_what_a_killed_daemon_left_undone_the_next_pass_does(zone_cfg) -> None:  # type: ignore[no-untyped-def]
    cfg, r53 = zone_cfg
    assert cfg.dns is not None
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    cut = FailingOnce(Route53Zone(cfg.aws, cfg.dns))
    first = Reconciler(cfg, store, slurm, cloud, clock=clock, dns_zone=cut)  # type: ignore[arg-type]
    spool = Spool(cfg.spool_dir)
    try:
        hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
        res = first.tick()
        assert len(store.active_instances()) == 2 and _records(r53, cfg) == {}
        assert res.cloud_failures, "the pass says Route 53 failed"
        # the daemon "restarts": a new reconciler writes the records the fleet never got
        clock.now += timedelta(seconds=10)
        second = Reconciler(cfg, store, slurm, cloud, clock=clock,
                            dns_zone=Route53Zone(cfg.aws, cfg.dns))
        second.tick()
        assert set(_records(r53, cfg)) == {f"spot-1.{DOMAIN}.", f"spot-2.{DOMAIN}."}
        # a record left by a daemon killed after a release (its instance terminated)
        r53.change_resource_record_sets(HostedZoneId=cfg.dns.hosted_zone_id, ChangeBatch={
            "Changes": [{"Action": "UPSERT", "ResourceRecordSet": {
                "Name": f"spot-7.{DOMAIN}.", "Type": "A", "TTL": 60,
                "ResourceRecords": [{"Value": "10.0.3.3"}]}}]})
        clock.now += timedelta(seconds=10)
        third = Reconciler(cfg, store, slurm, cloud, clock=clock,
                           dns_zone=Route53Zone(cfg.aws, cfg.dns))
        third.tick()
        assert set(_records(r53, cfg)) == {f"spot-1.{DOMAIN}.", f"spot-2.{DOMAIN}."}
    finally:
        store.close()


def test_check_says_when_the_zone_cannot_be_read(zone_cfg) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.check_launch import check_dns

    cfg, _ = zone_cfg
    assert cfg.dns is not None and check_dns(cfg) == []
    gone = cfg.model_copy(update={"dns": cfg.dns.model_copy(
        update={"hosted_zone_id": "Z0000000000NONE"})})
    (p,) = check_dns(gone)
    assert (p.severity, p.code) == ("error", "dns_unreadable") and "Z0000000000NONE" in p.message
