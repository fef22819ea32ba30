"""A local cluster whose AWS side is the stack `slurmscale aws-template` renders, deployed into
the moto server's CloudFormation, then written into the config by `slurmscale config
from-stack`, as a site does it.

moto's CloudFormation does not model every type the template declares; those are made here
as the template declares them, and said (UNMODELLED): the queue's policy (SetQueueAttributes
with the declared document, its references resolved) and placement groups (the harness
refuses a pool that names one: moto drops the outputs that refer to a resource it skipped)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3

from slurmscale.config import Config
from slurmscale.stack.template import munge_key_parameter, render

UNMODELLED = {"AWS::SQS::QueuePolicy": "made with SetQueueAttributes (Policy) as declared",
              "AWS::EC2::PlacementGroup": "not supported by this harness"}


def _client(service: str, url: str) -> Any:
    return boto3.client(service, region_name="us-east-1", endpoint_url=url,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def deploy(cfg: Config, cfg_path: Path, moto_url: str, vpc: str, subnet: str,
           munge_key: Path, env: dict[str, str]) -> dict[str, str]:
    """Deploys the stack named after the cluster; returns {logical id: what was made by
    hand, and how} for the types moto does not model. Raises RuntimeError on any failure."""
    template = render(cfg)
    for name, r in template["Resources"].items():
        if r["Type"] == "AWS::EC2::PlacementGroup":
            raise RuntimeError(f"{name}: a stack pool with a placement group is not supported "
                               "by the local cluster (moto's CloudFormation skips the type)")
    ec2, cfn = _client("ec2", moto_url), _client("cloudformation", moto_url)
    sg = ec2.create_security_group(GroupName=f"{cfg.cluster_name}-nodes", VpcId=vpc,
                                   Description="slurmscale nodes")["GroupId"]
    stack = cfg.cluster_name
    params = {"VpcId": vpc, "SubnetIds": subnet, "NodeSecurityGroupIds": sg,
              "NodeImageId": "ami-0a1b2c3d4e5f60718"}
    cfn.create_stack(StackName=stack, TemplateBody=json.dumps(template),
                     Parameters=[{"ParameterKey": k, "ParameterValue": v}
                                 for k, v in params.items()],
                     Capabilities=["CAPABILITY_IAM"])
    st = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    if st["StackStatus"] != "CREATE_COMPLETE":
        raise RuntimeError(f"stack {stack}: {st['StackStatus']}")
    physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
                for r in cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]}
    made: dict[str, str] = {}
    for name, r in template["Resources"].items():
        if r["Type"] == "AWS::SQS::QueuePolicy":
            doc = _resolve(r["Properties"]["PolicyDocument"], physical, moto_url)
            for q in r["Properties"]["Queues"]:
                _client("sqs", moto_url).set_queue_attributes(
                    QueueUrl=physical[q["Ref"]], Attributes={"Policy": json.dumps(doc)})
            made[name] = UNMODELLED[r["Type"]]
    # the site's one step the stack cannot take: its munge key as a SecureString
    _client("ssm", moto_url).put_parameter(
        Name=munge_key_parameter(cfg), Type="SecureString", Overwrite=True,
        Value=base64.b64encode(munge_key.read_bytes()).decode())
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(cfg_path),
                        "config", "from-stack", stack, "--write"], env=env,
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"config from-stack: {p.stderr.strip()}")
    return made


def _resolve(value: Any, physical: dict[str, str], moto_url: str) -> Any:
    """The declared document with its Ref/Fn::GetAtt Arn references made values."""
    if isinstance(value, list):
        return [_resolve(v, physical, moto_url) for v in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        return physical[value["Ref"]]
    if "Fn::GetAtt" in value:
        name, attr = value["Fn::GetAtt"]
        if attr != "Arn":
            raise RuntimeError(f"cannot resolve {name}.{attr}")
        phys = physical[name]
        if phys.startswith("http"):  # a queue's URL
            return _client("sqs", moto_url).get_queue_attributes(
                QueueUrl=phys, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return _client("events", moto_url).describe_rule(Name=phys)["Arn"]
    return {k: _resolve(v, physical, moto_url) for k, v in value.items()}
