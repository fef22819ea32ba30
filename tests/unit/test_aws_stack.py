"""The AWS side as code, without a cluster: the rendered CloudFormation template (cfn-lint
clean for every kind of pool), the IAM policies from the shipped documents (no placeholder
left, nothing granted on a value the config lacks), the stack's outputs written into the
config, `check`'s AWS pieces one misconfiguration at a time, and the bootstrap's munge key
read from SSM (the moto server)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmscale.config import Config
from slurmscale.config_file import parse_config
from slurmscale.stack import policies
from slurmscale.stack.outputs import StackError, apply
from slurmscale.stack.template import dump_yaml, pool_ids, render
from tests.unit.conftest import base_config

ROOT = Path(__file__).resolve().parents[2]


def _example() -> Config:
    return parse_config(yaml.safe_load((ROOT / "slurm_conf/slurmscale.example.yaml")
                                       .read_text()))


def _every_kind() -> Config:
    """Spot with a fallback, on-demand with EFA and a placement group, a capacity-block
    pool, a DNS zone and a munge key parameter of the site's own."""
    d = base_config(aws={"munge_key_parameter": "/site/munge"})
    d["pools"][0]["fallback_pool"] = "gpu-od"
    d["pools"][1].update(efa=True, placement_group="unit-pg")
    d["pools"].append({"name": "gpu_cb", "partition": "gpu-cb", "node_prefix": "cb-",
                       "max_nodes": 4, "instance_types": ["p5.48xlarge"],
                       "capacity_type": "capacity-block",
                       "capacity_reservations": {"ids": ["cr-0a1b2c3d4e5f60001"]},
                       "launch_template": {"name": "cb", "version": 1},
                       "subnets": ["subnet-1"]})
    return parse_config(d)


def _lint(template: dict[str, Any]) -> list[str]:
    from cfnlint.api import lint

    return [f"{m.rule.id} {m.message} (line {m.linenumber})"
            for m in lint(dump_yaml(template), regions=["us-east-1"])]


@pytest.mark.parametrize("make", [_example, _every_kind], ids=["example", "every-kind"])
def test_the_rendered_template_is_cfn_lint_clean(make) -> None:  # type: ignore[no-untyped-def]
    assert _lint(render(make(), conf_servers=("ctl:6817",))) == []


def test_a_template_cfn_lint_rejects_is_caught() -> None:
    """(the lint above can fail: a property CloudFormation does not have)"""
    t = render(_example())
    t["Resources"]["InterruptionQueue"]["Properties"]["RetentionDays"] = 3
    assert any("RetentionDays" in m for m in _lint(t))


def test_the_template_holds_what_each_pool_needs() -> None:
    cfg = _every_kind()
    t = render(cfg)
    res, out = t["Resources"], t["Outputs"]
    assert pool_ids(cfg) == {"gpu-spot": "GpuSpot", "gpu-od": "GpuOd", "gpu_cb": "GpuCb"}
    for stem in ("GpuSpot", "GpuOd", "GpuCb"):
        data = res[f"{stem}LaunchTemplate"]["Properties"]["LaunchTemplateData"]
        md = data["MetadataOptions"]
        assert md["HttpTokens"] == "required" and md["InstanceMetadataTags"] == "enabled"
        assert data["IamInstanceProfile"] == {"Arn": {"Fn::GetAtt": ["NodeInstanceProfile",
                                                                     "Arn"]}}
        user_data = data["UserData"]["Fn::Base64"]
        assert "node-init" in user_data and "--munge-key-parameter /site/munge" in user_data
        assert {f"{stem}LaunchTemplateId", f"{stem}LaunchTemplateVersion"} <= set(out)
    od = res["GpuOdLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert od["NetworkInterfaces"][0]["InterfaceType"] == "efa"
    assert "SecurityGroupIds" not in od
    cb = res["GpuCbLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert cb["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert "GpuOdPlacementGroup" in res and "GpuSpotPlacementGroup" not in res
    # the queue policy lets EventBridge deliver, for the stack's own rules only
    (st,) = res["InterruptionQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert st["Principal"] == {"Service": "events.amazonaws.com"}
    assert st["Action"] == "sqs:SendMessage"
    assert st["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        {"Fn::GetAtt": ["Ec2EventsRule", "Arn"]}, {"Fn::GetAtt": ["HealthEventsRule", "Arn"]}]
    kinds = res["Ec2EventsRule"]["Properties"]["EventPattern"]["detail-type"]
    assert {"EC2 Spot Instance Interruption Warning", "Capacity Block Expiration Warning",
            "EC2 Capacity Reservation Instance Interruption Warning"} <= set(kinds)


def _strings(v: Any) -> list[str]:
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    return [v] if isinstance(v, str) else []


def test_the_stacks_policies_leave_no_placeholder_and_keep_iams_own_variables() -> None:
    t = render(_example())
    for name in ("DaemonPolicy", "NodePolicy"):
        doc = t["Resources"][name]["Properties"]["PolicyDocument"]
        left = {m for s in _strings(doc) for m in policies.PLACEHOLDER.findall(s)}
        assert left == set(), (name, left)
    node = t["Resources"]["NodePolicy"]["Properties"]["PolicyDocument"]
    tag = next(st for st in node["Statement"] if st["Action"] == "ec2:CreateTags")
    # IAM's own variable survives Fn::Sub (escaped inside one, plain outside)
    assert tag["Condition"]["StringEquals"]["aws:ARN"] == "${ec2:SourceInstanceARN}"
    key = next(st for st in node["Statement"] if st["Action"] == "ssm:GetParameter")
    assert key["Resource"] == {"Fn::Sub": "arn:aws:ssm:${AWS::Region}:${AWS::AccountId}:"
                               "parameter/slurmscale/train-east/munge-key"}
    daemon = t["Resources"]["DaemonPolicy"]["Properties"]["PolicyDocument"]
    launch = next(st for st in daemon["Statement"]
                  if st["Sid"] == "LaunchFromTheNodeTemplatesAndSubnets")
    assert [r for r in launch["Resource"] if "launch-template" in r["Fn::Sub"]] == [
        {"Fn::Sub": "arn:aws:ec2:${AWS::Region}:${AWS::AccountId}:launch-template/"
                    "${GpuSpotLaunchTemplate}"},
        {"Fn::Sub": "arn:aws:ec2:${AWS::Region}:${AWS::AccountId}:launch-template/"
                    "${GpuOndemandLaunchTemplate}"}]


def test_a_rendered_policy_fills_every_value_and_leaves_out_what_has_none() -> None:
    values = {"REGION": "eu-west-1", "ACCOUNT_ID": "123456789012", "CLUSTER_NAME": "c",
              "HOSTED_ZONE_ID": "", "NODE_ROLE_NAME": "c-node", "QUEUE_NAME": "q",
              "MUNGE_KEY_PARAMETER": ""}
    doc = policies.render("daemon", values, ["lt-0a", "lt-0b"])
    text = json.dumps(doc)
    assert not policies.PLACEHOLDER.search(text)
    assert "route53" not in text  # no zone: no statement on every zone
    assert "launch-template/lt-0a" in text and "launch-template/lt-0b" in text
    assert "arn:aws:ec2:eu-west-1:123456789012:instance/*" in text
    assert "launch-template" not in json.dumps(policies.render("daemon", values, []))
    node = policies.render("node", values, [])
    assert [st["Sid"] for st in node["Statement"]] == ["ReportOwnBoot"]


def test_the_stacks_outputs_fill_the_config_and_a_second_apply_changes_nothing() -> None:
    cfg = _every_kind()
    data = json.loads(cfg.model_dump_json(exclude_unset=True))
    outputs = {"ClusterName": "unit", "Region": "eu-west-1",
               "InterruptionQueueUrl": "https://sqs.eu-west-1.amazonaws.com/1/q",
               "MungeKeyParameter": "/site/munge", "SubnetIds": "subnet-a,subnet-b",
               "HostedZoneId": "Z0123456789ABC", "DomainName": "unit.internal",
               "GpuOdPlacementGroup": "unit-pg-123"}
    for i, stem in enumerate(("GpuSpot", "GpuOd", "GpuCb")):
        outputs[f"{stem}LaunchTemplateId"] = f"lt-0{i}"
        outputs[f"{stem}LaunchTemplateVersion"] = "1"
    new, changes = apply(data, cfg, outputs)
    got = parse_config(new)
    assert got.aws.region == "eu-west-1" and got.aws.interruption_queue_url.endswith("/q")
    assert got.dns is not None and got.dns.hosted_zone_id == "Z0123456789ABC"
    assert [(p.launch_template.id, p.subnets) for p in got.pools] == [
        ("lt-00", ["subnet-a", "subnet-b"]), ("lt-01", ["subnet-a", "subnet-b"]),
        ("lt-02", ["subnet-a", "subnet-b"])]
    assert got.pool("gpu-od").placement_group == "unit-pg-123"
    assert "pools[gpu-od].placement_group: unit-pg -> unit-pg-123" in [c.line() for c in changes]
    assert apply(new, got, outputs)[1] == []
    with pytest.raises(StackError, match="no output GpuCbLaunchTemplateId"):
        apply(data, cfg, {k: v for k, v in outputs.items() if k != "GpuCbLaunchTemplateId"})
    with pytest.raises(StackError, match="cluster 'other'"):
        apply(data, cfg, {**outputs, "ClusterName": "other"})


# --- check's AWS pieces ---------------------------------------------------------------------
def _queue(policy: dict | None = None, rules: dict | str | None = None, kms: str | None = None):  # type: ignore[no-untyped-def]
    from slurmscale.check_aws import EventQueueSetup
    from slurmscale.stack.template import event_rules, queue_policy

    arn = "arn:aws:sqs:us-east-1:1:q"
    return EventQueueSetup(arn, queue_policy(arn, ["r"]) if policy is None else policy, kms,
                     {n: ("ENABLED", p) for n, p in event_rules().items()}
                     if rules is None else rules)


def _codes(problems) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return sorted((p.severity, p.code) for p in problems)


def test_check_sees_every_broken_piece_of_the_events_path() -> None:
    from slurmscale.check_aws import check_events

    cfg = parse_config(base_config(aws={"interruption_queue_url": "https://sqs/1/q"}))
    assert check_events(cfg, _queue()) == []
    assert _codes(check_events(cfg, "AWS.SimpleQueueService.NonExistentQueue: no")) == [
        ("error", "queue_unreadable")]
    assert _codes(check_events(cfg, _queue(policy={}))) == [("error", "queue_policy")]
    other = {"Statement": [{"Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"},
                            "Action": "sqs:SendMessage"}]}
    assert _codes(check_events(cfg, _queue(policy=other))) == [("error", "queue_policy")]
    assert _codes(check_events(cfg, _queue(kms="alias/aws/sqs"))) == [("error", "queue_kms")]
    # no rule: the spot pool's warnings are an error, the rest warnings
    assert _codes(check_events(cfg, _queue(rules={}))) == [
        ("error", "event_rule"), ("warning", "event_rule"), ("warning", "event_rule")]
    only_spot = {"r": ("ENABLED", {"source": ["aws.ec2"], "detail-type": [
        "EC2 Spot Instance Interruption Warning"]})}
    assert _codes(check_events(cfg, _queue(rules=only_spot))) == [
        ("warning", "event_rule"), ("warning", "event_rule")]
    disabled = {n: ("DISABLED", p) for n, (_, p) in _queue().rules.items()}
    assert ("error", "event_rule") in _codes(check_events(cfg, _queue(rules=disabled)))
    # a pattern naming no detail-type, or a content filter, matches
    assert check_events(cfg, _queue(rules={"a": ("ENABLED", {"source": ["aws.ec2"]}),
                                           "h": ("ENABLED", {"source": [{"prefix": "aws."}]})
                                           })) == []
    none = parse_config(base_config())
    assert _codes(check_events(none, None)) == [("warning", "no_events_queue")]


def test_check_sees_a_block_pool_without_its_events() -> None:
    from slurmscale.check_aws import check_events

    d = base_config(aws={"interruption_queue_url": "https://sqs/1/q"})
    d["pools"][0].update(capacity_type="capacity-block",
                         capacity_reservations={"ids": ["cr-0a1b2c3d4e5f60001"]})
    cfg = parse_config(d)
    # AWS's pages spell the block events two ways; a rule with either spelling counts
    short = {"r": ("ENABLED", {"source": ["aws.ec2"], "detail-type": [
        "Capacity Block Delivered", "Capacity Block Expiration Warning",
        "EC2 Instance State-change Notification"]}), "h": _queue().rules["health-events"]}
    assert ("error", "event_rule") not in _codes(check_events(cfg, _queue(rules=short)))
    assert _codes(check_events(cfg, _queue(rules={"h": short["h"]}))).count(
        ("error", "event_rule")) == 2


def test_check_sees_the_munge_key_parameter_and_a_lazy_loaded_image() -> None:
    from slurmscale.check_aws import ImageRestore, check_image_restore, check_munge_key

    cfg = parse_config(base_config(aws={"munge_key_parameter": "/c/munge"}))
    assert check_munge_key(cfg, "SecureString") == []
    assert _codes(check_munge_key(cfg, None)) == [("error", "munge_key_parameter")]
    assert _codes(check_munge_key(cfg, "error: AccessDeniedException: no")) == [
        ("error", "munge_key_parameter")]
    assert _codes(check_munge_key(cfg, "String")) == [("warning", "munge_key_parameter")]
    assert check_munge_key(parse_config(base_config()), None) == []

    zones = {"subnet-1": "us-east-1a", "subnet-2": "us-east-1b"}
    data = {"ImageId": "ami-1", "BlockDeviceMappings": [{"DeviceName": "/dev/sda1",
                                                         "Ebs": {"VolumeSize": 200}}]}
    templates = {("gpu-spot", "3"): data, ("gpu-od", "2"): data}
    lazy = {"ami-1": ImageRestore("snap-1", frozenset({"us-east-1a"}))}
    got = check_image_restore(cfg, templates, zones, lazy)
    assert [(p.code, "us-east-1b" in p.message) for p in got] == [("image_lazy_load", True)]
    fast = {"ami-1": ImageRestore("snap-1", frozenset({"us-east-1a", "us-east-1b"}))}
    assert check_image_restore(cfg, templates, zones, fast) == []
    rated = {**data, "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {
        "VolumeInitializationRate": 300}}]}
    assert check_image_restore(cfg, {k: rated for k in templates}, zones, lazy) == []
    assert check_image_restore(cfg, templates, zones, {}) == []  # unreadable: not judged


def test_the_image_restore_read_parses_ec2s_answers() -> None:
    """gather_image_restores on EC2's real shapes (botocore's Stubber checks them against
    the service model)."""
    from botocore.stub import Stubber

    from slurmscale.check_aws import ImageRestore, gather_image_restores

    cfg = parse_config(base_config())
    import boto3

    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("describe_images", {"Images": [{
        "ImageId": "ami-1", "RootDeviceName": "/dev/sda1", "BlockDeviceMappings": [
            {"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": "snap-1"}}]}]})
    stub.add_response("describe_fast_snapshot_restores", {"FastSnapshotRestores": [
        {"SnapshotId": "snap-1", "AvailabilityZone": "us-east-1a", "State": "enabled"}]})
    import slurmscale.cloud.aws as aws

    with stub, pytest.MonkeyPatch.context() as mp:
        mp.setattr(aws, "make_client", lambda *a, **k: client)
        got = gather_image_restores(cfg, {("gpu-spot", "3"): {"ImageId": "ami-1"}})
    assert got == {"ami-1": ImageRestore("snap-1", frozenset({"us-east-1a"}))}


# --- the bootstrap's munge key --------------------------------------------------------------
@pytest.fixture
def ssm(monkeypatch):  # type: ignore[no-untyped-def]
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_ENDPOINT_URL_SSM": url}.items():
        monkeypatch.setenv(k, v)
    yield boto3.client("ssm", region_name="us-east-1", endpoint_url=url)
    server.stop()


def test_the_bootstrap_installs_the_munge_key_from_its_parameter(ssm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurmscale import node_init

    key = os.urandom(1024)
    ssm.put_parameter(Name="/c/munge", Type="SecureString",
                      Value=base64.b64encode(key).decode())
    got = node_init.munge_key(None, "us-east-1", "/c/munge")
    assert got == key
    path = tmp_path / "munge.key"
    marker = tmp_path / "restarted"
    assert node_init.install_munge_key(got, str(path), f"touch {marker}") is True
    assert path.read_bytes() == key and stat.S_IMODE(path.stat().st_mode) == 0o400
    assert marker.exists()
    marker.unlink()
    assert node_init.install_munge_key(got, str(path), f"touch {marker}") is False
    assert not marker.exists()  # unchanged: munged left alone
    with pytest.raises(node_init.BootError) as e:
        node_init.install_munge_key(b"x" * 64, str(path), "false")
    assert e.value.cause == "munge-key" and "exited 1" in e.value.what


def test_the_bootstrap_refuses_a_missing_or_malformed_key(ssm) -> None:  # type: ignore[no-untyped-def]
    from slurmscale import node_init

    with pytest.raises(node_init.BootError) as e:
        node_init.munge_key(None, "us-east-1", "/c/none")
    assert e.value.cause == "munge-key" and "/c/none" in e.value.what
    ssm.put_parameter(Name="/c/bad", Type="SecureString", Value="not base64!")
    with pytest.raises(node_init.BootError, match="base64"):
        node_init.munge_key(None, "us-east-1", "/c/bad")
    ssm.put_parameter(Name="/c/short", Type="SecureString",
                      Value=base64.b64encode(b"k" * 8).decode())
    with pytest.raises(node_init.BootError, match="8 bytes"):
        node_init.munge_key(None, "us-east-1", "/c/short")


# --- the commands ---------------------------------------------------------------------------
def _cli(*args: str, config: Path) -> Any:
    from click.testing import CliRunner

    from slurmscale.cli import cli

    return CliRunner().invoke(cli, ["--config", str(config), *args])


def test_aws_template_and_aws_policy_from_the_command_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "slurmscale.yaml"
    p.write_text((ROOT / "slurm_conf/slurmscale.example.yaml").read_text())
    os.chmod(p, 0o644)
    r = _cli("aws-template", config=p)
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(r.output)["Resources"]["GpuSpotLaunchTemplate"]
    r = _cli("aws-policy", "node", "--account", "123456789012", config=p)
    assert r.exit_code == 0, r.output
    assert "arn:aws:ec2:us-east-1:123456789012:instance/*" in r.output
    assert not policies.PLACEHOLDER.search(r.stdout)
    r = _cli("aws-policy", "node", "--account", "12345", config=p)
    assert r.exit_code == 2 and "'12345' is not a 12-digit" in r.output


def test_the_node_image_recipe_fits_image_builder_and_carries_the_bootstrap() -> None:
    """The component document inline stays within CreateComponent's `data` (botocore's model
    of Image Builder says how long it may be); the script unpacks the very bootstrap."""
    import gzip

    import botocore.session

    from slurmscale import node_init
    from slurmscale.node_image import render_component, render_script

    model = botocore.session.get_session().get_service_model("imagebuilder")
    limit = model.operation_model("CreateComponent").input_shape.members["data"].metadata["max"]
    doc = render_component("24.11.5")
    assert len(doc) <= limit / 2, (len(doc), limit)  # (room to grow: the bootstrap is not in)
    parsed = yaml.safe_load(doc)
    (build,) = parsed["phases"][0]["steps"]
    assert build["action"] == "ExecuteBash"
    assert build["inputs"]["commands"] == [render_script("24.11.5", bootstrap=False)]
    assert "gzip -dc" not in doc and "the user data brings it" in doc
    script = render_script("24.11.5")
    assert "SLURM_VERSION=${SLURM_VERSION:-24.11.5}" in script
    packed = script.split("gzip -dc > \"$NODE_INIT\"\n")[1].split("EOF\n")[0]
    assert gzip.decompress(base64.b64decode(packed)) == Path(node_init.__file__).read_bytes()
