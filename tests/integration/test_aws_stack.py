"""The AWS side as code, end to end on a real Slurm 22.05 and the moto server: the stack
`slurmscale aws-template` renders is deployed into moto's CloudFormation (the types moto does
not model made as the template declares them: `made_by_hand`), `slurmscale config from-stack`
writes the config, `slurmscale check` passes against that stack and the running Slurm, a 2-node
gang runs on the stack's launch template (its nodes reading the munge key from the stack's
parameter), and a spot interruption warning put on EventBridge's bus reaches the daemon through
the stack's rule and queue and requeues the job. Then `check` exits 1 on each broken piece, one
at a time: a mistyped queue URL, a template version without tags in metadata, an unreadable
munge parameter, the queue policy gone, the rule gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml

from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import AWS_ENV, LocalCluster
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm


def _client(c: LocalCluster, service: str):  # type: ignore[no-untyped-def]
    return boto3.client(service, region_name="us-east-1", endpoint_url=c.moto_url,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def _check(c: LocalCluster, cfg: Path | None = None) -> tuple[int, list[dict]]:
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config",
                        str(cfg or c.cfg_path), "check", "--json"],
                       env={**os.environ, **AWS_ENV}, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, json.loads(p.stdout)["problems"]


def _variant(c: LocalCluster, name: str, edit) -> Path:  # type: ignore[no-untyped-def]
    """A copy of the cluster's config with one edit, beside it."""
    data = yaml.safe_load(c.cfg_path.read_text())
    edit(data)
    p = c.cfg_path.with_name(f"{name}.yaml")
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    os.chmod(p, 0o644)
    return p


def _errors(problems: list[dict]) -> set[str]:
    return {p["code"] for p in problems if p["severity"] == "error"}


def test_a_gang_runs_on_the_stack_and_check_names_each_broken_piece(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _proxy = make_cluster(aws_stack=True, pools=[PoolSpec("gpu-spot", "spot-", 4)],
                             capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10})
    assert c.made_by_hand == {"InterruptionQueuePolicy":
                              "made with SetQueueAttributes (Policy) as declared"}
    cfg = c.cfg
    assert cfg is not None and cfg.aws.munge_key_parameter == f"/slurmscale/{c.name}/munge-key"
    (pool,) = cfg.pools
    assert pool.launch_template.id and pool.launch_template.id.startswith("lt-")
    assert cfg.dns is not None and cfg.aws.interruption_queue_url

    rc, problems = _check(c)
    assert rc == 0 and not _errors(problems), problems

    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 30")
    c.wait_job(job, {"RUNNING"}, 150)
    log = "\n".join(p.read_text(errors="replace") for p in (c.root / "log").glob("*")
                    if p.is_file())
    assert f"munge key from {cfg.aws.munge_key_parameter}: unchanged" in log
    victim = expand(c.job(job)["NodeList"])[0]
    iid = next(i["InstanceId"] for i in c.cluster_instances(("running",))
               if {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(TAG_NODE) == victim)
    # as EC2 emits it: onto the default bus, where the stack's rule routes it to the queue
    _client(c, "events").put_events(Entries=[{
        "Source": "aws.ec2", "DetailType": "EC2 Spot Instance Interruption Warning",
        "Resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{iid}"],
        "Detail": json.dumps({"instance-id": iid, "instance-action": "terminate"})}])
    wait_for("the job requeued once", lambda: c.job(job).get("Restarts") == "1", 60)
    wait_for(f"{iid} terminated", lambda: iid not in
             {i["InstanceId"] for i in c.cluster_instances(("pending", "running"))}, 120)

    # each broken piece, one at a time: exit 1, the piece named
    url = cfg.aws.interruption_queue_url
    typo = _variant(c, "typo", lambda d: d["aws"].update(
        interruption_queue_url=url[:-1] + ("x" if url[-1] != "x" else "y")))
    rc, problems = _check(c, typo)
    assert rc == 1 and "queue_unreadable" in _errors(problems), problems

    ec2 = _client(c, "ec2")
    v2 = ec2.create_launch_template_version(
        LaunchTemplateId=pool.launch_template.id, SourceVersion=pool.launch_template.version,
        LaunchTemplateData={"MetadataOptions": {"HttpTokens": "required",
                                                "InstanceMetadataTags": "disabled"}})
    version = str(v2["LaunchTemplateVersion"]["VersionNumber"])
    no_tags = _variant(c, "no-tags", lambda d: d["pools"][0]["launch_template"].update(
        version=version))
    rc, problems = _check(c, no_tags)
    assert rc == 1 and "metadata_tags" in _errors(problems), problems

    no_key = _variant(c, "no-key", lambda d: d["aws"].update(
        munge_key_parameter="/slurmscale/nobody/munge-key"))
    rc, problems = _check(c, no_key)
    assert rc == 1 and "munge_key_parameter" in _errors(problems), problems

    sqs = _client(c, "sqs")
    policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    rc, problems = _check(c)
    assert rc == 1 and _errors(problems) == {"queue_policy"}, problems
    sqs.set_queue_attributes(QueueUrl=url, Attributes=policy)

    events = _client(c, "events")
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    for rule in events.list_rule_names_by_target(TargetArn=arn)["RuleNames"]:
        if "aws.ec2" in events.describe_rule(Name=rule)["EventPattern"]:
            events.remove_targets(Rule=rule, Ids=["slurmscale-queue"])
            events.delete_rule(Name=rule)
    rc, problems = _check(c)
    assert rc == 1 and _errors(problems) == {"event_rule"}, problems
    assert any("EC2 Spot Instance Interruption Warning" in p["message"] for p in problems)
