"""`slurmscale check`, EC2's launch path: every pool's launch template versions (instance tags
in metadata, or its nodes cannot learn their names: an error; IMDSv2 required and user data
carrying the node bootstrap; EFA interfaces where `efa: true`; a reserved version that
targets the reservations and a pool version that does not; a block pool's version with
market type capacity-block and a reservation target, which EC2 Fleet takes only from the
template), the capacity reservations and blocks, the instance types' shapes against the node
lines, the cluster's DNS zone and the subnets. Pure checks of what `gather_*` read, as in
check.py, so each misconfiguration has a unit test."""

from __future__ import annotations

import time

from slurmscale.check import Problem
from slurmscale.config import CapacityType, Config, Pool
from slurmscale.model import CapacityReservation, InstanceShape
from slurmscale.policy.blocks import GONE_STATES, at

# (pool, launch template version) -> its LaunchTemplateData, or the error reading it
Templates = dict[tuple[str, str], dict | str]


def templates_to_read(cfg: Config) -> list[tuple[str, str]]:
    out = []
    for p in cfg.pools:  # every pool: its nodes learn their names from metadata tags
        cr = p.capacity_reservations
        out.append((p.name, p.launch_template.version))
        if cr is not None and cr.launch_template_version:
            out.append((p.name, cr.launch_template_version))
    return out


def user_data_text(data: dict) -> str:
    """A template's user data as text (base64, maybe gzip: cloud-init takes both)."""
    import base64
    import gzip

    try:
        raw = base64.b64decode(data.get("UserData", "") or "")
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (ValueError, OSError, EOFError):
        return ""
    return raw.decode(errors="replace")


def check_instance_side(p: Pool, v: str, data: dict) -> list[Problem]:
    """What a node of this template needs to join Slurm by itself (docs/node-image.md)."""
    out = []
    md = data.get("MetadataOptions", {})
    if md.get("InstanceMetadataTags") != "enabled":
        out.append(Problem("error", "metadata_tags", f"pool {p.name}: launch template version "
                           f"{v} does not put instance tags in metadata (MetadataOptions "
                           "InstanceMetadataTags: enabled): its nodes cannot learn their names"))
    if md.get("HttpTokens") != "required":
        out.append(Problem("error", "imdsv2", f"pool {p.name}: launch template version {v} "
                           "does not require IMDSv2 (MetadataOptions HttpTokens: required): "
                           "any process on the node could read the role's credentials "
                           "through IMDSv1"))
    if not (data.get("IamInstanceProfile") or {}).get("Arn") and \
            not (data.get("IamInstanceProfile") or {}).get("Name"):
        out.append(Problem("error", "instance_profile", f"pool {p.name}: launch template "
                           f"version {v} gives its nodes no instance profile: the bootstrap "
                           "cannot tag a boot failure (the daemon then waits out join_timeout_s"
                           ") nor read the munge key parameter (the stack's NodeInstanceProfile"
                           "; docs/node-iam-policy.json)"))
    text = user_data_text(data)
    if "node-init" not in text:
        out.append(Problem("warning", "userdata_bootstrap", f"pool {p.name}: launch template "
                           f"version {v} has user data without the node bootstrap (`slurmscale "
                           f"node-userdata --pool {p.name}` renders it): the image must start "
                           "it itself"))
    return out


def check_templates(cfg: Config, templates: Templates) -> list[Problem]:
    out: list[Problem] = []

    def warn(code: str, msg: str) -> None:
        out.append(Problem("warning", code, msg))

    for p in cfg.pools:
        cr = p.capacity_reservations
        versions = [p.launch_template.version] + (
            [cr.launch_template_version] if cr and cr.launch_template_version else [])
        for v in versions:
            data = templates.get((p.name, v))
            if isinstance(data, str):
                # every launch of the pool names this version: one EC2 will not show (gone,
                # a name that is not one, no credentials, no permission) fails them all
                out.append(Problem("error", "template_unreadable", f"pool {p.name}: launch "
                                   f"template version {v} cannot be read from EC2 ({data}): "
                                   "every launch of the pool would fail"))
                continue
            if data is None:
                continue
            out += check_instance_side(p, v, data)
            target = data.get("CapacityReservationSpecification", {})
            market = data.get("InstanceMarketOptions", {}).get("MarketType")
            if p.efa and not any(ni.get("InterfaceType") == "efa"
                                 for ni in data.get("NetworkInterfaces", [])):
                warn("efa_missing", f"pool {p.name} is marked efa: true, but launch template "
                     f"version {v} has no network interface of InterfaceType efa: its gangs "
                     "would run NCCL over TCP")
            if p.capacity_type is CapacityType.CAPACITY_BLOCK:
                pinned = target.get("CapacityReservationTarget", {}).get("CapacityReservationId")
                if pinned or market == "spot":
                    warn("block_template", f"capacity-block pool {p.name}: launch template "
                         f"version {v} " + (f"targets block {pinned}" if pinned else
                                            "asks for spot") + ": slurmscale's fleets name the "
                         "open block(s) by id (reserved-capacity), so the template should "
                         "target none (one block in the template sent every later window's "
                         "fleets to that block)")
            elif cr is not None and v == cr.launch_template_version:
                if not target.get("CapacityReservationTarget") and \
                        target.get("CapacityReservationPreference") != "open":
                    warn("reservation_template", f"pool {p.name}: reserved launch template "
                         f"version {v} targets no reservation (by resource group, or open): "
                         "its gangs would not land in the reservations")
            elif cr is not None and target.get("CapacityReservationTarget"):
                warn("reservation_template", f"pool {p.name}: launch template version {v} "
                     "targets reservations, so gangs that do not fit them whole could be "
                     "split into them; only capacity_reservations.launch_template_version "
                     "should target them")
    return out


# EC2's Linux platforms (a reservation's InstancePlatform; the others are Windows)
LINUX_PLATFORMS = ("Linux/UNIX", "Red Hat Enterprise Linux", "RHEL", "SUSE Linux",
                   "Ubuntu Pro", "Linux with SQL Server")

# reservation id -> as EC2 describes it, or why it could not be read
Reservations = dict[str, CapacityReservation | str]


def reserved_template(p: Pool) -> tuple[str, str]:
    """The launch template version a pool's gangs go into its reservations with."""
    cr = p.capacity_reservations
    return (p.name, (cr.launch_template_version if cr is not None
                     and cr.launch_template_version else p.launch_template.version))


def check_reservations(cfg: Config, found: Reservations, zones: dict[str, str] | None = None,
                       now: float | None = None, templates: Templates | None = None,
                       platforms: dict[str, str] | None = None) -> list[Problem]:
    """Each pool's reservation ids against DescribeCapacityReservations: EC2 knows them, a
    capacity-block pool lists blocks and any other pool none, each holds one of the pool's
    instance types (a gang goes in only by type), is in an AZ one of the pool's subnets is in
    (`zones`: subnet -> AZ, as EC2 showed them; a fleet launches into a reservation only in
    its zone, and every launch would fail ReservedCapacityTooSmall), matches the instances'
    tenancy and platform (`templates`: the reserved version's Placement.Tenancy and ImageId;
    `platforms`: image -> PlatformDetails; EC2 matches an instance to a reservation by type,
    platform, AZ and tenancy), and will still take instances (not expired, cancelled or
    failed; a block not past its end)."""
    now = time.time() if now is None else now
    out: list[Problem] = []
    for p in cfg.pools:
        if p.capacity_reservations is None:
            continue
        data = (templates or {}).get(reserved_template(p))
        tenancy = (data.get("Placement", {}).get("Tenancy", "default")
                   if isinstance(data, dict) else None)
        image = data.get("ImageId") if isinstance(data, dict) else None
        platform = (platforms or {}).get(image) if image else None
        block_pool = p.capacity_type is CapacityType.CAPACITY_BLOCK
        pool_zones = sorted({zones[s] for s in p.subnets if s in zones}) if zones else []
        for rid in p.capacity_reservations.ids:
            r = found.get(rid)
            if isinstance(r, str) or r is None:
                out.append(Problem("error", "reservation_unknown", f"pool {p.name}: "
                                   f"capacity reservation {rid} cannot be read from EC2 "
                                   f"({r or 'not returned'}): no gang will launch into it"))
                continue
            is_block = r.reservation_type == "capacity-block"
            if is_block != block_pool:
                out.append(Problem("error", "reservation_kind", f"pool {p.name}: {rid} is "
                                   f"{'a Capacity Block' if is_block else 'no Capacity Block'}"
                                   f" ({r.reservation_type}), the pool is "
                                   f"{p.capacity_type.value}"))
            if r.instance_type not in p.instance_types:
                out.append(Problem("warning", "reservation_type", f"pool {p.name}: {rid} "
                                   f"holds {r.instance_type}, not one of the pool's "
                                   f"{', '.join(p.instance_types)}: never launched into"))
            if pool_zones and r.availability_zone not in pool_zones:
                out.append(Problem("error", "reservation_zone", f"pool {p.name}: {rid} is in "
                                   f"{r.availability_zone}, none of the pool's subnets is "
                                   f"(they are in {', '.join(pool_zones)}): every launch into "
                                   "it would fail; add a subnet in its zone"))
            if tenancy is not None and r.tenancy != tenancy:
                out.append(Problem("error", "reservation_tenancy", f"pool {p.name}: {rid} is "
                                   f"for {r.tenancy} tenancy, the launch template version "
                                   f"{reserved_template(p)[1]} launches {tenancy}: no "
                                   "instance would go in"))
            if platform is not None and r.platform != platform:
                out.append(Problem("error", "reservation_platform", f"pool {p.name}: {rid} is "
                                   f"for {r.platform}, the image {image} is {platform}: no "
                                   "instance would go in"))
            elif platform is None and not r.platform.startswith(LINUX_PLATFORMS):
                out.append(Problem("error", "reservation_platform", f"pool {p.name}: {rid} is "
                                   f"for {r.platform}: Slurm's nodes run Linux"))
            past = r.end is not None and r.end <= now
            if r.state in GONE_STATES or (is_block and past):
                out.append(Problem("error", "reservation_gone", f"pool {p.name}: {rid} is "
                                   f"{r.state}" + (f", ended {at(r.end)}" if past and r.end
                                                   else "")
                                   + ": it takes no instances; its jobs would pend for it"))
    return out


def gather_platforms(cfg: Config, templates: Templates) -> dict[str, str]:
    """The images of the reserved template versions -> their PlatformDetails ({} when EC2
    cannot say: the platform is then checked only for being Linux)."""
    images = sorted({d["ImageId"] for p in cfg.pools if p.capacity_reservations
                     if isinstance(d := templates.get(reserved_template(p)), dict)
                     and d.get("ImageId")})
    if not images:
        return {}
    from slurmscale.cloud.ec2 import EC2Cloud
    from slurmscale.cloud.protocol import CloudError

    try:
        return EC2Cloud(cfg.aws).image_platforms(images)
    except CloudError:
        return {}


def gather_reservations(cfg: Config) -> Reservations:
    """Every pool's reservations, from EC2: one call, or one per id when one id is bad."""
    ids = sorted({i for p in cfg.pools if p.capacity_reservations
                  for i in p.capacity_reservations.ids})
    if not ids:
        return {}
    from slurmscale.cloud.ec2 import EC2Cloud
    from slurmscale.cloud.protocol import CloudError

    ec2 = EC2Cloud(cfg.aws)
    try:
        return {r.id: r for r in ec2.capacity_reservations(ids)}
    except CloudError:
        pass
    out: Reservations = {}
    for i in ids:
        try:
            out.update((r.id, r) for r in ec2.capacity_reservations([i]))
        except CloudError as e:
            out[i] = str(e)
    return out


def check_shapes(cfg: Config, found: dict[str, InstanceShape] | str) -> list[Problem]:
    """Each pool's node sizes against DescribeInstanceTypes: every type EC2 knows, the
    pool's types of one shape (one node line describes them all), and no size larger than
    the type has (a node line asking for more GPUs, CPUs or memory than the instance has is
    a node that never joins: the bootstrap's GPU check fails it, or slurmctld sets it
    INVALID). `found` a string: the call failed (said once)."""
    if isinstance(found, str):
        return [Problem("error", "instance_types_unreadable", "the pools' instance types "
                        f"cannot be read from EC2 ({found}): node sizes are unchecked")]
    out: list[Problem] = []

    def err(code: str, msg: str) -> None:
        out.append(Problem("error", code, msg))

    for p in cfg.pools:
        shapes = [found.get(t) for t in p.instance_types]
        for t, sh in zip(p.instance_types, shapes, strict=True):
            if sh is None:
                err("instance_type_unknown", f"pool {p.name}: EC2 has no instance type {t}")
        known = [sh for sh in shapes if sh is not None]
        if not known:
            continue
        first = known[0]
        for sh in known[1:]:
            if (sh.vcpus, sh.memory_mib, sh.gpus) != (first.vcpus, first.memory_mib, first.gpus):
                err("instance_types_differ", f"pool {p.name}: {first.instance_type} "
                    f"({_shape(first)}) and {sh.instance_type} ({_shape(sh)}) differ: one "
                    "Slurm node line must fit every type of a pool (give each a pool)")
        least = min(known, key=lambda sh: (sh.gpus, sh.vcpus, sh.memory_mib))
        if p.gpus_per_node != least.gpus:
            err("gpus_per_node", f"pool {p.name}: gpus_per_node is {p.gpus_per_node}, "
                f"{least.instance_type} has {least.gpus} GPUs: its node line would "
                + ("promise GPUs the instance lacks" if p.gpus_per_node > least.gpus
                   else "leave GPUs unscheduled"))
        if p.cpus_per_node is not None and p.cpus_per_node > least.vcpus:
            err("cpus_per_node", f"pool {p.name}: cpus_per_node is {p.cpus_per_node}, "
                f"{least.instance_type} has {least.vcpus} vCPUs")
        if p.real_memory_mb is not None and p.real_memory_mb > least.memory_mib:
            err("real_memory_mb", f"pool {p.name}: real_memory_mb is {p.real_memory_mb}, "
                f"{least.instance_type} has {least.memory_mib} MiB")
    return out


def _shape(sh: InstanceShape) -> str:
    return f"{sh.gpus} GPUs, {sh.vcpus} vCPUs, {sh.memory_mib} MiB"


def gather_shapes(cfg: Config) -> dict[str, InstanceShape] | str:
    """Every pool's instance types' shapes from EC2, or why they could not be read."""
    from slurmscale.cloud.ec2 import EC2Cloud
    from slurmscale.cloud.protocol import CloudError

    try:
        return EC2Cloud(cfg.aws).instance_shapes([t for p in cfg.pools for t in
                                                  p.instance_types])
    except CloudError as e:
        return str(e)


def check_dns(cfg: Config) -> list[Problem]:
    """`dns:`'s zone can be listed (the daemon lists it before every change)."""
    if cfg.dns is None:
        return []
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.cloud.route53 import Route53Zone

    try:
        Route53Zone(cfg.aws, cfg.dns).records()
    except CloudError as e:
        return [Problem("error", "dns_unreadable", f"dns: Route 53 zone "
                        f"{cfg.dns.hosted_zone_id} cannot be read ({e}): node names would "
                        "not be written")]
    return []


# subnet id -> why EC2 would not show it (only the subnets it would not)
Unreadable = dict[str, str]


def check_subnets(cfg: Config, unreadable: Unreadable | str) -> list[Problem]:
    """Each pool's subnets against DescribeSubnets: a subnet EC2 does not show fails every
    fleet that offers it (`unreadable` a string: the call itself failed, for every subnet)."""
    out: list[Problem] = []
    for p in cfg.pools:
        for sid in p.subnets:
            why = unreadable if isinstance(unreadable, str) else unreadable.get(sid)
            if why is not None:
                out.append(Problem("error", "subnet_unreadable", f"pool {p.name}: subnet "
                                   f"{sid} cannot be read from EC2 ({why}): its launches "
                                   "would fail"))
    return out


def gather_subnets(cfg: Config) -> tuple[dict[str, str], Unreadable | str]:
    """The pools' subnets as EC2 shows them (subnet -> AZ), and those it will not show, each
    with why: one call, or one per subnet when one id is bad; a string when EC2 cannot be
    asked at all."""
    from slurmscale.cloud.ec2 import EC2Cloud
    from slurmscale.cloud.protocol import CloudError

    ids = sorted({s for p in cfg.pools for s in p.subnets})
    ec2 = EC2Cloud(cfg.aws)
    try:
        shown = ec2.subnet_zones(ids)
        return shown, {s: "not returned" for s in ids if s not in shown}
    except CloudError as e:
        if not e.code.startswith("InvalidSubnetID"):
            return {}, str(e)  # (credentials, permission, the endpoint: the same for each)
    zones: dict[str, str] = {}
    out: Unreadable = {}
    for sid in ids:
        try:
            one = ec2.subnet_zones([sid])
        except CloudError as e:
            out[sid] = str(e)
            continue
        zones.update(one)
        if sid not in one:
            out[sid] = "not returned"
    return zones, out


def gather_templates(cfg: Config) -> Templates:
    """The launch template versions `check_templates` needs, from EC2."""
    want = templates_to_read(cfg)
    if not want:
        return {}
    from slurmscale.cloud.ec2 import EC2Cloud
    from slurmscale.cloud.protocol import CloudError

    ec2 = EC2Cloud(cfg.aws)
    out: Templates = {}
    for name, version in want:
        try:
            out[(name, version)] = ec2.launch_template_data(cfg.pool(name), version)
        except CloudError as e:
            out[(name, version)] = str(e)
    return out
