"""`slurmscale check`, the AWS pieces the daemon depends on beyond EC2's launch path: the
events queue (readable, with a policy that lets EventBridge deliver, and a rule targeting it
for every kind of event the config relies on), the munge key parameter, and whether a new
node's root volume lazy-loads its image.

Why each matters, from AWS's own pages:
- EventBridge delivers to an SQS target only through the queue's resource-based policy
  (EventBridge user guide, "Using resource-based policies for Amazon EventBridge"): without
  `sqs:SendMessage` for events.amazonaws.com the rules deliver nothing, and spot warnings,
  block events and scheduled changes are never seen.
- A rule's event pattern matches an event when each field it names lists the event's value
  (EventBridge user guide, "Event patterns"); a disabled rule delivers nothing.
- A volume created from a snapshot loads its blocks from S3 on first read unless the snapshot
  has fast snapshot restore in that zone or the volume an initialization rate (EC2 user guide,
  "Initialize Amazon EBS volumes"): a GPU image of tens of GB then boots minutes slower.

Pure checks of what `gather_*` read, as in check.py, so each misconfiguration has a unit test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from slurmscale.check import Problem
from slurmscale.check_launch import Templates
from slurmscale.cloud.eventbridge import BLOCK_KINDS, EventKind
from slurmscale.config import CapacityType, Config


@dataclass(frozen=True)
class EventQueueSetup:
    """What AWS said of the events queue and the rules targeting it."""

    arn: str
    policy: dict[str, Any] | None  # the queue's resource policy (None: it has none)
    kms_key: str | None = None  # KmsMasterKeyId
    # rule name -> (state, event pattern); a str: the rules could not be listed, why
    rules: dict[str, tuple[str, dict[str, Any]]] | str = field(default_factory=dict)


@dataclass(frozen=True)
class Needed:
    """An event kind the config relies on, what misses it costs, and how bad that is."""

    source: str
    detail_type: str
    severity: str
    why: str


def needed_events(cfg: Config) -> list[Needed]:
    kinds = {p.capacity_type for p in cfg.pools}
    out = []
    if CapacityType.SPOT in kinds:
        out.append(Needed("aws.ec2", EventKind.SPOT_WARNING.value, "error",
                          "spot pools' jobs would not be requeued before EC2 reclaims "
                          "their nodes"))
    if any(p.capacity_reservations for p in cfg.pools):
        out.append(Needed("aws.ec2", EventKind.RESERVATION_INTERRUPTION.value, "warning",
                          "an interruptible reservation's reclaim would go unhandled"))
    if CapacityType.CAPACITY_BLOCK in kinds:
        for name in ("Capacity Block Reservation Delivered",
                     "Capacity Block Reservation Expiration Warning"):
            # (either spelling AWS's pages show counts: matched below)
            out.append(Needed("aws.ec2", name, "error",
                              "a block's window would open and close by the clock alone"))
    out.append(Needed("aws.ec2", EventKind.STATE_CHANGE.value, "warning",
                      "an instance stopped or terminated outside slurmscale is noticed only "
                      "by the next sweep"))
    out.append(Needed("aws.health", EventKind.SCHEDULED.value, "warning",
                      "EC2 scheduled changes are seen only by DescribeInstanceStatus "
                      "(health.status_interval_s)"))
    return out


def _allows(values: Any, want: str) -> bool:
    """A pattern field (None: not named) admits `want`: named literally, or by a content
    filter (prefix, anything-but, ...), which this check does not evaluate and so trusts."""
    if values is None:
        return True
    if not isinstance(values, list):
        values = [values]
    return any(v == want or isinstance(v, dict) for v in values)


def matches(pattern: dict[str, Any], source: str, detail_type: str) -> bool:
    if not _allows(pattern.get("source"), source):
        return False
    names = {detail_type} | {k for k, v in BLOCK_KINDS.items()
                              if v is BLOCK_KINDS.get(detail_type)}
    return any(_allows(pattern.get("detail-type"), n) for n in names)


def allows_eventbridge(policy: dict[str, Any] | None) -> bool:
    """The queue policy has an Allow of sqs:SendMessage for events.amazonaws.com (conditions,
    such as the rules' aws:SourceArn, are the site's to scope)."""
    if not policy:
        return False
    sts = policy.get("Statement", [])
    for st in sts if isinstance(sts, list) else [sts]:
        if not isinstance(st, dict) or st.get("Effect") != "Allow":
            continue
        principal = st.get("Principal")
        services = principal.get("Service") if isinstance(principal, dict) else principal
        services = services if isinstance(services, list) else [services]
        if not ({"events.amazonaws.com", "*"} & set(services)):
            continue
        actions = st.get("Action", [])
        actions = actions if isinstance(actions, list) else [actions]
        if {"sqs:SendMessage", "sqs:*", "*"} & set(actions):
            return True
    return False


def check_events(cfg: Config, found: EventQueueSetup | str | None) -> list[Problem]:
    """The events queue and what feeds it (`found` None: no queue configured; a str: the
    queue could not be read, why)."""
    url = cfg.aws.interruption_queue_url
    if url is None:
        if any(p.capacity_type in (CapacityType.SPOT, CapacityType.CAPACITY_BLOCK)
               for p in cfg.pools):
            return [Problem("warning", "no_events_queue", "aws.interruption_queue_url is "
                            "not set: spot warnings, block events and scheduled changes are "
                            "not handled (the stack's InterruptionQueueUrl output; "
                            "docs/aws-stack.md)")]
        return []
    if isinstance(found, str) or found is None:
        return [Problem("error", "queue_unreadable", f"aws.interruption_queue_url {url} "
                        f"cannot be read ({found}): spot warnings, block events and scheduled "
                        "changes would go unhandled; fix the URL (the stack's "
                        "InterruptionQueueUrl output) or give the daemon sqs:ReceiveMessage "
                        "on it")]
    out: list[Problem] = []
    if not allows_eventbridge(found.policy):
        out.append(Problem("error", "queue_policy", f"queue {found.arn}: its policy does not "
                           "let EventBridge send (an Allow of sqs:SendMessage for principal "
                           "events.amazonaws.com): the rules deliver nothing"))
    if found.kms_key and found.kms_key.startswith("alias/aws/sqs"):
        out.append(Problem("error", "queue_kms", f"queue {found.arn} is encrypted with the AWS "
                           "managed key alias/aws/sqs, which EventBridge cannot use: use "
                           "SSE-SQS or a customer managed key"))
    if isinstance(found.rules, str):
        out.append(Problem("warning", "rules_unreadable", f"the EventBridge rules targeting "
                           f"{found.arn} cannot be listed ({found.rules})"))
        return out
    enabled = [pat for state, pat in found.rules.values() if state == "ENABLED"]
    for n in needed_events(cfg):
        if not any(matches(p, n.source, n.detail_type) for p in enabled):
            out.append(Problem(n.severity, "event_rule", f"no enabled EventBridge rule sends "
                               f"{n.source} \"{n.detail_type}\" to {found.arn}: {n.why}"))
    return out


def check_munge_key(cfg: Config, found: str | None) -> list[Problem]:
    """`found`: the parameter's type, None when SSM does not list it, or "error: why"."""
    name = cfg.aws.munge_key_parameter
    if name is None:
        return []
    if found is None or found.startswith("error: "):
        why = "SSM has no such parameter" if found is None else found[len("error: "):]
        return [Problem("error", "munge_key_parameter", f"aws.munge_key_parameter {name}: "
                        f"{why}: nodes would boot without the cluster's munge key (put it: "
                        f"aws ssm put-parameter --name {name} --type SecureString --value "
                        "\"$(base64 -w0 /etc/munge/munge.key)\")")]
    if found != "SecureString":
        return [Problem("warning", "munge_key_parameter", f"aws.munge_key_parameter {name} is "
                        f"a {found}, not a SecureString: the key is stored unencrypted")]
    return []


@dataclass(frozen=True)
class ImageRestore:
    """A template's image: its root snapshot and the zones with fast snapshot restore."""

    snapshot: str
    fsr_zones: frozenset[str]


def check_image_restore(cfg: Config, templates: Templates, zones: dict[str, str],
                        images: dict[str, ImageRestore]) -> list[Problem]:
    """A warning per pool whose first boots lazy-load the image: its zones lack fast snapshot
    restore for the image's root snapshot and its template gives the root volume no
    initialization rate (`images`: image id -> what EC2 said; an image not there was not
    readable and is not judged)."""
    out = []
    for p in cfg.pools:
        data = templates.get((p.name, p.launch_template.version))
        if not isinstance(data, dict) or data.get("ImageId") not in images:
            continue
        if any((m.get("Ebs") or {}).get("VolumeInitializationRate")
               for m in data.get("BlockDeviceMappings", [])):
            continue
        img = images[data["ImageId"]]
        want = {zones[s] for s in p.subnets if s in zones}
        slow = sorted(want - img.fsr_zones)
        if slow:
            out.append(Problem("warning", "image_lazy_load", f"pool {p.name}: image "
                               f"{data['ImageId']}'s snapshot {img.snapshot} has no fast "
                               f"snapshot restore in {', '.join(slow)} and launch template "
                               f"version {p.launch_template.version} sets no EBS volume "
                               "initialization rate: each first boot reads the image from S3 "
                               "as it goes (the stack's VolumeInitializationRate parameter, or "
                               "`aws ec2 enable-fast-snapshot-restores`)"))
    return out


# --- gathering: what AWS says, never raising -----------------------------------------------
def gather_queue(cfg: Config) -> EventQueueSetup | str | None:
    url = cfg.aws.interruption_queue_url
    if url is None:
        return None
    from slurmscale.cloud.aws import call, make_client
    from slurmscale.cloud.protocol import CloudError

    sqs = make_client("sqs", cfg.aws, cfg.aws.sqs_endpoint_url or cfg.aws.endpoint_url)
    try:
        attrs = call(sqs, "get_queue_attributes", QueueUrl=url,
                     AttributeNames=["QueueArn", "Policy", "KmsMasterKeyId"])["Attributes"]
    except CloudError as e:
        return str(e)
    arn = attrs.get("QueueArn", "")
    try:
        policy = json.loads(attrs["Policy"]) if attrs.get("Policy") else None
    except ValueError:
        policy = None
    return EventQueueSetup(arn, policy, attrs.get("KmsMasterKeyId"), _rules(cfg, arn))


def _rules(cfg: Config, arn: str) -> dict[str, tuple[str, dict[str, Any]]] | str:
    from slurmscale.cloud.aws import call, make_client
    from slurmscale.cloud.protocol import CloudError

    ev = make_client("events", cfg.aws, cfg.aws.endpoint_url)
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    try:
        names: list[str] = []
        token: dict[str, str] = {}
        while True:
            page = call(ev, "list_rule_names_by_target", TargetArn=arn, **token)
            names += page.get("RuleNames", [])
            if not page.get("NextToken"):
                break
            token = {"NextToken": page["NextToken"]}
        for name in names:
            r = call(ev, "describe_rule", Name=name)
            try:
                pattern = json.loads(r.get("EventPattern") or "{}")
            except ValueError:
                pattern = {}
            out[name] = (str(r.get("State", "")), pattern if isinstance(pattern, dict) else {})
    except CloudError as e:
        return str(e)
    return out


def gather_munge_key(cfg: Config) -> str | None:
    name = cfg.aws.munge_key_parameter
    if name is None:
        return None
    from slurmscale.cloud.aws import call, make_client
    from slurmscale.cloud.protocol import CloudError

    ssm = make_client("ssm", cfg.aws, cfg.aws.endpoint_url)
    try:  # (DescribeParameters: the parameter's metadata, never its value)
        got = call(ssm, "describe_parameters", ParameterFilters=[
            {"Key": "Name", "Option": "Equals", "Values": [name]}])["Parameters"]
    except CloudError as e:
        return f"error: {e}"
    return str(got[0].get("Type", "")) if got else None


def gather_image_restores(cfg: Config, templates: Templates) -> dict[str, ImageRestore]:
    """Each pool template's image's root snapshot and its zones with fast snapshot restore
    enabled; an image, or a restore state, EC2 will not show is left out (not judged)."""
    images = sorted({d["ImageId"] for d in templates.values()
                     if isinstance(d, dict) and d.get("ImageId")})
    if not images:
        return {}
    from slurmscale.cloud.aws import call, make_client
    from slurmscale.cloud.protocol import CloudError

    ec2 = make_client("ec2", cfg.aws, cfg.aws.endpoint_url)
    out: dict[str, ImageRestore] = {}
    for image in images:
        try:
            (img,) = call(ec2, "describe_images", ImageIds=[image])["Images"]
            root = img.get("RootDeviceName")
            snap = next(m["Ebs"]["SnapshotId"] for m in img.get("BlockDeviceMappings", [])
                        if m.get("DeviceName") == root and m.get("Ebs", {}).get("SnapshotId"))
            fsr = call(ec2, "describe_fast_snapshot_restores", Filters=[
                {"Name": "snapshot-id", "Values": [snap]},
                {"Name": "state", "Values": ["enabled", "optimizing"]}])
        except (CloudError, ValueError, StopIteration, KeyError):
            continue
        out[image] = ImageRestore(snap, frozenset(
            r["AvailabilityZone"] for r in fsr.get("FastSnapshotRestores", [])))
    return out
