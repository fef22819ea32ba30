"""The CloudFormation template of a cluster's AWS side, rendered from slurmscale.yaml.

Rendered, not a fixed file, because what it must hold follows the config: one launch template
per pool (its user data is the pool's own bootstrap, `slurmscale node-userdata`), a cluster
placement group per pool that names one, the EventBridge rules for the events the daemon acts
on, and IAM policies scoped to this cluster's tag, templates, queue and zone. What a site
chooses at deploy time (VPC, subnets, security groups, the node image, the root volume, an
existing private zone) are the stack's parameters, so one rendered template serves every
deploy of that config, from the console or the CLI.

What it creates (AWS's CloudFormation template reference for each type):
- the daemon's role, instance profile and managed policy (docs/iam-policy.json, filled in);
- the nodes' role, instance profile and managed policy (docs/node-iam-policy.json: tag its
  own boot error, read the munge key parameter);
- per pool, a launch template: the node image, the instance profile, IMDSv2 required and
  instance tags in metadata (the bootstrap learns its node from its tag), the rendered user
  data, an encrypted gp3 root volume (optionally with an EBS volume initialization rate, so
  the first boot does not lazy-load the image from S3: EC2 user guide, "Initialize Amazon
  EBS volumes"), EFA interfaces for an `efa: true` pool, and market type capacity-block for
  a block pool;
- the events queue with the queue policy EventBridge needs to deliver to it (EventBridge user
  guide, "Using resource-based policies for Amazon EventBridge": for SQS targets EventBridge
  uses the queue's resource-based policy; without `sqs:SendMessage` for
  events.amazonaws.com the rules deliver nothing), scoped to the stack's own rules;
- an EventBridge rule for the EC2 events the daemon acts on (spot interruption warnings,
  capacity reservation interruption warnings, rebalance recommendations, state changes,
  Capacity Block delivery and expiration warnings) and one for AWS Health's scheduled changes
  to EC2 instances, each targeting the queue;
- the private hosted zone for node names, associated with the VPC (unless an existing zone's
  id is given).
Not created: the munge key's SSM SecureString (CloudFormation cannot create a SecureString
parameter: SSM API reference, PutParameter `Type`; the site puts its own key, one command),
and a second template version targeting capacity reservations (a CloudFormation launch
template has one version at a time; docs/capacity.md makes it by hand)."""

from __future__ import annotations

import re
from typing import Any

from slurmscale.cli_node import USER_DATA_LIMIT, render_user_data
from slurmscale.cloud.eventbridge import BLOCK_KINDS, EventKind
from slurmscale.config import CapacityType, Config, Pool
from slurmscale.stack import policies

# CloudFormation takes a template body of at most this many bytes inline (CreateStack's
# TemplateBody); a larger one goes through S3 (`aws cloudformation deploy --s3-bucket`)
TEMPLATE_BODY_LIMIT = 51200

EC2_EVENTS = sorted({EventKind.SPOT_WARNING.value, EventKind.RESERVATION_INTERRUPTION.value,
                     EventKind.REBALANCE.value, EventKind.STATE_CHANGE.value, *BLOCK_KINDS})
# AWS Health's events for EC2 whose category is a scheduled change (retirement, maintenance)
HEALTH_PATTERN = {"source": ["aws.health"], "detail-type": [EventKind.SCHEDULED.value],
                  "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}}


def event_rules() -> dict[str, dict[str, Any]]:
    """The stack's EventBridge rules' patterns, by rule: the EC2 events the daemon acts on,
    and AWS Health's scheduled changes to EC2."""
    return {"ec2-events": {"source": ["aws.ec2"], "detail-type": EC2_EVENTS},
            "health-events": HEALTH_PATTERN}


def queue_policy(queue_arn: Any, rule_arns: list[Any]) -> dict[str, Any]:
    """The queue's resource policy: EventBridge may send to it for the cluster's rules."""
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "EventBridgeDeliversTheClustersRules", "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sqs:SendMessage", "Resource": queue_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}}}]}


def munge_key_parameter(cfg: Config) -> str:
    """The SSM parameter holding the munge key: the config's, else the stack's default."""
    return cfg.aws.munge_key_parameter or f"/slurmscale/{cfg.cluster_name}/munge-key"


def pool_ids(cfg: Config) -> dict[str, str]:
    """Pool name -> the CamelCase stem of its resources' logical ids and outputs (gpu-spot ->
    GpuSpot); alphanumeric as CloudFormation requires, a number added where two pools' names
    differ only in punctuation or case."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for p in cfg.pools:
        stem = "".join(w[:1].upper() + w[1:] for w in re.split(r"[-_]+", p.name) if w)
        stem, n = stem or "Pool", 2
        base = stem
        while stem.lower() in taken:
            stem, n = f"{base}{n}", n + 1
        taken.add(stem.lower())
        out[p.name] = stem
    return out


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def _ref(name: str) -> dict[str, str]:
    return {"Ref": name}


def _att(name: str, attr: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [name, attr]}


def _parameters(cfg: Config) -> dict[str, Any]:
    return {
        "VpcId": {"Type": "AWS::EC2::VPC::Id",
                  "Description": "The cluster's VPC (the private zone is associated with it)"},
        "SubnetIds": {"Type": "List<AWS::EC2::Subnet::Id>",
                      "Description": "Subnets the pools launch into (one zone each)"},
        "NodeSecurityGroupIds": {
            "Type": "List<AWS::EC2::SecurityGroup::Id>",
            "Description": "The nodes' security groups: slurmctld <-> slurmd, and node to "
                           "node for jobs (EFA needs a group allowing all traffic to itself)"},
        "NodeImageId": {"Type": "AWS::EC2::Image::Id",
                        "Description": "The node image (docs/node-image.md builds one)"},
        "RootDeviceName": {"Type": "String", "Default": "/dev/sda1",
                           "Description": "The image's root device (/dev/sda1 on Ubuntu, "
                                          "/dev/xvda on Amazon Linux)"},
        "RootVolumeSizeGiB": {"Type": "Number", "Default": 200, "MinValue": 8,
                              "MaxValue": 16384},
        "VolumeInitializationRate": {
            "Type": "Number", "Default": 0, "MinValue": 0, "MaxValue": 300,
            "Description": "MiB/s at which a new root volume is read from the image's "
                           "snapshot (100-300; 0: EC2's default lazy loading, or the "
                           "snapshot's fast snapshot restore where enabled)"},
        "HostedZoneId": {"Type": "String", "Default": "",
                         "Description": "An existing private hosted zone for node names; "
                                        "empty: the stack creates one for DomainName"},
        "DomainName": {"Type": "String", "Default": f"{cfg.cluster_name.lower()}.internal",
                       "Description": "The node names' domain (<node>.<domain>)"},
    }


def _conditions() -> dict[str, Any]:
    return {
        "CreateZone": {"Fn::Equals": [_ref("HostedZoneId"), ""]},
        "HasInitializationRate": {"Fn::Not": [
            {"Fn::Equals": [_ref("VolumeInitializationRate"), 0]}]},
    }


def _zone() -> dict[str, Any]:
    return {"Fn::If": ["CreateZone", _ref("HostedZone"), _ref("HostedZoneId")]}


def _role(description: str) -> dict[str, Any]:
    return {"Type": "AWS::IAM::Role", "Properties": {
        "Description": description,
        "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole"}]}}}


def _identity(who: str, cfg: Config, doc_file: str, doc: dict[str, Any]) -> dict[str, Any]:
    """A role, its managed policy and an instance profile: `who` is Daemon or Node."""
    what = {"Daemon": "daemon", "Node": "nodes"}[who]
    return {
        f"{who}Role": _role(f"slurmscale {what} of cluster {cfg.cluster_name}"),
        f"{who}Policy": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {
            "Description": f"slurmscale {what} of cluster {cfg.cluster_name} ({doc_file})",
            "Roles": [_ref(f"{who}Role")], "PolicyDocument": doc}},
        f"{who}InstanceProfile": {"Type": "AWS::IAM::InstanceProfile", "Properties": {
            "Roles": [_ref(f"{who}Role")]}},
    }


def _launch_template(cfg: Config, pool: Pool, user_data: str) -> dict[str, Any]:
    ebs: dict[str, Any] = {
        "VolumeSize": _ref("RootVolumeSizeGiB"), "VolumeType": "gp3", "Encrypted": True,
        "DeleteOnTermination": True,
        "VolumeInitializationRate": {"Fn::If": ["HasInitializationRate",
                                                _ref("VolumeInitializationRate"),
                                                _ref("AWS::NoValue")]}}
    data: dict[str, Any] = {
        "ImageId": _ref("NodeImageId"),
        "IamInstanceProfile": {"Arn": _att("NodeInstanceProfile", "Arn")},
        # IMDSv2 only; tags in metadata (the bootstrap reads its node tag); a hop limit of 2
        # so a bootstrap in a container still reaches the metadata service
        "MetadataOptions": {"HttpEndpoint": "enabled", "HttpTokens": "required",
                            "InstanceMetadataTags": "enabled", "HttpPutResponseHopLimit": 2},
        "UserData": {"Fn::Base64": user_data},
        "BlockDeviceMappings": [{"DeviceName": _ref("RootDeviceName"), "Ebs": ebs}],
    }
    if pool.efa:  # (the fleet's override gives the subnet; EFA wants its interface in the
        # template: EC2 user guide, "Get started with EFA and NCCL")
        data["NetworkInterfaces"] = [{"DeviceIndex": 0, "InterfaceType": "efa",
                                      "Groups": _ref("NodeSecurityGroupIds"),
                                      "DeleteOnTermination": True}]
    else:
        data["SecurityGroupIds"] = _ref("NodeSecurityGroupIds")
    if pool.capacity_type is CapacityType.CAPACITY_BLOCK:
        # EC2 Fleet takes the capacity-block market type only from the template
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return {"Type": "AWS::EC2::LaunchTemplate", "Properties": {
        "LaunchTemplateName": _sub(f"${{AWS::StackName}}-{pool.name}"),
        "LaunchTemplateData": data}}


def render(cfg: Config, conf_servers: tuple[str, ...] = (),
           slurm_conf: str | None = None) -> dict[str, Any]:
    """The template (a dict, dumped as YAML or JSON by the caller)."""
    ids = pool_ids(cfg)
    munge = munge_key_parameter(cfg)
    with_key = cfg.model_copy(update={"aws": cfg.aws.model_copy(
        update={"munge_key_parameter": munge})})
    res: dict[str, Any] = {}
    out: dict[str, Any] = {}
    templates: list[str] = []
    for p in cfg.pools:
        stem = ids[p.name]
        text = render_user_data(with_key, with_key.pool(p.name), conf_servers, slurm_conf)
        if len(text.encode()) > USER_DATA_LIMIT:
            raise ValueError(f"pool {p.name}: user data of {len(text.encode())} bytes is over "
                             f"EC2's {USER_DATA_LIMIT}")
        res[f"{stem}LaunchTemplate"] = _launch_template(cfg, p, text)
        templates.append(f"${{{stem}LaunchTemplate}}")
        out[f"{stem}LaunchTemplateId"] = {
            "Description": f"pool {p.name}: launch_template.id",
            "Value": _ref(f"{stem}LaunchTemplate")}
        out[f"{stem}LaunchTemplateVersion"] = {
            "Description": f"pool {p.name}: launch_template.version",
            "Value": _att(f"{stem}LaunchTemplate", "LatestVersionNumber")}
        if p.placement_group is not None:
            res[f"{stem}PlacementGroup"] = {"Type": "AWS::EC2::PlacementGroup", "Properties": {
                "Strategy": "cluster",
                "Tags": [{"Key": "slurmscale:cluster", "Value": cfg.cluster_name}]}}
            out[f"{stem}PlacementGroup"] = {
                "Description": f"pool {p.name}: placement_group",
                "Value": _ref(f"{stem}PlacementGroup")}
    refs = {"REGION": "${AWS::Region}", "ACCOUNT_ID": "${AWS::AccountId}",
            "CLUSTER_NAME": cfg.cluster_name, "HOSTED_ZONE_ID": "${ZoneId}",
            "NODE_ROLE_NAME": "${NodeRole}", "QUEUE_NAME": "${InterruptionQueue.QueueName}",
            "MUNGE_KEY_PARAMETER": munge.lstrip("/")}
    daemon_doc = policies.for_stack("daemon", refs, templates)
    node_doc = policies.for_stack("node", refs, [])
    _zone_vars(daemon_doc)
    res.update(_identity("Daemon", cfg, "docs/iam-policy.json", daemon_doc))
    res.update(_identity("Node", cfg, "docs/node-iam-policy.json", node_doc))
    res.update(_events_and_zone(cfg))
    outputs = {
        "ClusterName": {"Description": "cluster_name", "Value": cfg.cluster_name},
        "Region": {"Description": "aws.region", "Value": _ref("AWS::Region")},
        "InterruptionQueueUrl": {"Description": "aws.interruption_queue_url",
                                 "Value": _ref("InterruptionQueue")},
        "MungeKeyParameter": {"Description": "aws.munge_key_parameter (put the key there)",
                              "Value": munge},
        "SubnetIds": {"Description": "every pool's subnets",
                      "Value": {"Fn::Join": [",", _ref("SubnetIds")]}},
        "HostedZoneId": {"Description": "dns.hosted_zone_id", "Value": _zone()},
        "DomainName": {"Description": "dns.domain", "Value": _ref("DomainName")},
        "DaemonPolicyArn": {"Description": "the daemon's policy (attach it to the head "
                                           "node's role, or run it with DaemonInstanceProfile)",
                            "Value": _ref("DaemonPolicy")},
        "DaemonInstanceProfile": {"Description": "an instance profile for the head node",
                                  "Value": _ref("DaemonInstanceProfile")},
        "NodeRoleArn": {"Description": "the nodes' role", "Value": _att("NodeRole", "Arn")},
        **out,
    }
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"slurmscale: the AWS side of Slurm cluster {cfg.cluster_name} "
                       "(rendered by `slurmscale aws-template`; docs/aws-stack.md)",
        "Parameters": _parameters(cfg),
        "Conditions": _conditions(),
        "Resources": res,
        "Outputs": outputs,
    }


def _events_and_zone(cfg: Config) -> dict[str, Any]:
    """The interruption queue and the EventBridge rules that feed it, and the node names'
    private zone (where the stack makes one)."""
    return {
        # a warning is worth 2 minutes, a block's expiration 40: an hour is plenty
        "InterruptionQueue": {"Type": "AWS::SQS::Queue", "Properties": {
            "MessageRetentionPeriod": 3600, "SqsManagedSseEnabled": True}},
        "InterruptionQueuePolicy": {"Type": "AWS::SQS::QueuePolicy", "Properties": {
            "Queues": [_ref("InterruptionQueue")],
            "PolicyDocument": queue_policy(_att("InterruptionQueue", "Arn"), [
                _att("Ec2EventsRule", "Arn"), _att("HealthEventsRule", "Arn")])}},
        "Ec2EventsRule": {"Type": "AWS::Events::Rule", "Properties": {
            "Description": f"EC2 events slurmscale acts on, cluster {cfg.cluster_name}",
            "EventPattern": event_rules()["ec2-events"],
            "Targets": [{"Id": "slurmscale-queue",
                         "Arn": _att("InterruptionQueue", "Arn")}]}},
        "HealthEventsRule": {"Type": "AWS::Events::Rule", "Properties": {
            "Description": f"AWS Health scheduled changes to EC2, cluster {cfg.cluster_name}",
            "EventPattern": event_rules()["health-events"],
            "Targets": [{"Id": "slurmscale-queue",
                         "Arn": _att("InterruptionQueue", "Arn")}]}},
        "HostedZone": {"Type": "AWS::Route53::HostedZone", "Condition": "CreateZone",
                       "Properties": {
                           "Name": _ref("DomainName"),
                           "HostedZoneConfig": {"Comment": f"slurmscale node names of "
                                                           f"cluster {cfg.cluster_name}"},
                           "VPCs": [{"VPCId": _ref("VpcId"),
                                     "VPCRegion": _ref("AWS::Region")}]}},
    }


def _zone_vars(doc: dict[str, Any]) -> None:
    """The zone id is a parameter or the stack's own zone: Fn::Sub strings naming ${ZoneId}
    get it as a variable (Fn::Sub's two-argument form)."""
    for st in doc["Statement"]:
        res = st.get("Resource")
        for i, r in enumerate(res if isinstance(res, list) else [res]):
            if isinstance(r, dict) and "${ZoneId}" in r.get("Fn::Sub", ""):
                sub = {"Fn::Sub": [r["Fn::Sub"], {"ZoneId": _zone()}]}
                if isinstance(res, list):
                    res[i] = sub
                else:
                    st["Resource"] = sub


def dump_yaml(template: dict[str, Any]) -> str:
    """YAML as CloudFormation reads it (long-form intrinsic functions), multi-line strings
    (the user data) as literal blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(d: yaml.SafeDumper, s: str) -> yaml.Node:
        return d.represent_scalar("tag:yaml.org,2002:str", s,
                                  style="|" if "\n" in s else None)

    _Dumper.add_representer(str, _str)
    return str(yaml.dump(template, Dumper=_Dumper, sort_keys=False, width=100))
