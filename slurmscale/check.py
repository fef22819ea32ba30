"""`slurmscale check`: the config against the running Slurm, one line per problem.

What it compares: every pool's partition and CLOUD nodes exist; slurm.conf's power-saving
hooks are slurmscale's and SlurmUser may run them; SlurmUser may read the config and write the
spool; ResumeTimeout outlasts every pool's boot time (and matches the config, whose daemon
gives up on a silent EC2 at half of it); SuspendTime is the backstop behind the policy's idle
limits (and, before Slurm 23.02, the longest hold); the settings slurmscale relies on
(JobRequeue, idle_on_node_suspend) are on, and Slurm remembers ended jobs long enough for
the reports (MinJobAge).

Every pool's launch template versions are read from EC2: instance tags in metadata (else its
nodes cannot learn their names: an error), IMDSv2 required and user data carrying the node
bootstrap (warnings); EFA interfaces where `efa: true`; a reserved version that targets the
reservations and a pool version that does not; a block pool's version with market type
capacity-block and a reservation target (EC2 Fleet takes both only from the template).

The checks are pure functions of what Slurm printed, what EC2 stores and what the filesystem
says, so each misconfiguration has a unit test; `gather` reads the real thing."""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurmscale.config import CapacityType, Config, Pool
from slurmscale.hostlists import expand
from slurmscale.model import CapacityReservation, InstanceShape
from slurmscale.policy.blocks import GONE_STATES, at
from slurmscale.slurm.kv import parse_oneliner, parse_show_config, release_of
from slurmscale.slurmconf import (
    BLOCK_PLUGIN,
    REQUEUE_ON_RESUME_FAILURE,
    apply_nodes,
    ctld_parameters,
)
from slurmscale.slurmconf_site import LISTS, SiteConfError, items, read_site, site_items

HOOKS = {"ResumeProgram": "slurmscale-resume", "SuspendProgram": "slurmscale-suspend",
         "ResumeFailProgram": "slurmscale-resume-fail"}
R, W, X = 4, 2, 1
MIN_JOB_AGE_S = 120  # two of the ledger's once-a-minute reads of ended jobs


@dataclass(frozen=True)
class Problem:
    severity: str  # error | warning
    code: str
    message: str

    def line(self) -> str:
        return f"{self.severity.upper():<7} {self.code}: {self.message}"


@dataclass(frozen=True)
class SlurmView:
    """What `scontrol show config`, `show partition -o` and `show node -o` printed."""

    config: dict[str, str]
    partitions: set[str]
    nodes: dict[str, str]  # name -> State
    # name -> the node line's size as slurmctld holds it: CPUTot, RealMemory, Gres
    sizes: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # the site's own slurm.conf values (slurmconf_site.read_site; None: not read, and why)
    site: dict[str, list[str]] | None = None
    site_error: str = ""


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gids: frozenset[int]


def seconds(value: str) -> int | None:
    """"180 sec" -> 180; "NONE", "INFINITE", "" -> None."""
    m = re.match(r"^(-?\d+)", value)
    return int(m.group(1)) if m else None


def slurm_user(cfg_value: str) -> User | None:
    """SlurmUser as `scontrol show config` prints it: "slurm(64030)"."""
    name = cfg_value.split("(")[0].strip()
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    return User(name, pw.pw_uid, frozenset(os.getgrouplist(name, pw.pw_gid)))


def may(user: User, path: Path, want: int) -> str | None:
    """None if `user` may access `path` with `want` (R/W/X bits, as for "other"), else why
    not. Every directory on the way must be searchable. Root may do anything but execute a
    file no one may execute."""
    try:
        parts = [*reversed(path.parents), path]
        for i, p in enumerate(parts):
            st = p.stat()
            bits = want if i == len(parts) - 1 else X
            if user.uid == 0:
                if bits & X and not st.st_mode & 0o111 and not stat.S_ISDIR(st.st_mode):
                    return f"{p} is executable by no one"
                continue
            if st.st_uid == user.uid:
                have = (st.st_mode >> 6) & 7
            elif st.st_gid in user.gids:
                have = (st.st_mode >> 3) & 7
            else:
                have = st.st_mode & 7
            if have & bits != bits:
                return (f"{p} (mode {st.st_mode & 0o777:04o}, owner "
                        f"{_name(st.st_uid)}:{_group(st.st_gid)}) denies it")
    except OSError as e:
        return f"{e.filename}: {e.strerror}"
    return None


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def check(cfg: Config, view: SlurmView, config_path: Path) -> list[Problem]:
    """What the config and the running Slurm disagree on, errors and warnings, in the order
    an admin fixes them: the pools' partitions and nodes, the Slurm release's options, the
    hooks and who can run them, the timers."""
    c = view.config
    return (_check_pools(cfg, view) + _check_site(cfg, view) + _check_release(c)
            + _check_hooks(cfg, c, config_path) + _check_timers(cfg, c)
            + _check_topology(cfg, c))


def _check_site(cfg: Config, view: SlurmView) -> list[Problem]:
    """Every value of the site's own comma lists (SlurmctldParameters, PrivateData, GresTypes,
    SchedulerParameters: Slurm keeps one line of each) and every one slurmscale needs is in
    what slurmctld runs: a later line that replaced the site's is named, not passed as ok."""
    f = _Found()
    c = view.config
    if view.site is None:
        if view.site_error:
            f.warn("site_conf_unreadable", f"{view.site_error}: the site's own "
                   f"{', '.join(LISTS)} cannot be compared with what Slurm runs")
    else:
        for key in LISTS:
            running = {v.lower() for v in items(c.get(key))}
            lost = [v for v in site_items(view.site, key) if v.lower() not in running]
            if lost:
                f.err("site_value_lost", f"{key} runs as {c.get(key) or '(null)'}, without "
                      f"the site's own {','.join(lost)} (its slurm.conf sets it): a later "
                      f"{key} line replaced it. Render slurmscale's lines with `slurmscale "
                      "slurm-conf --output FILE` (they keep the site's values), Include FILE "
                      "as slurm.conf's last line and restart slurmctld")
    if any(p.gpus_per_node for p in cfg.pools) and \
            "gpu" not in {v.lower() for v in items(c.get("GresTypes"))}:
        f.err("gres_types", f"GresTypes is {c.get('GresTypes') or '(null)'}, without gpu: "
              "Slurm cannot give the pools' GPUs to jobs (`slurmscale slurm-conf` renders it)")
    if "cloud" not in {v.lower() for v in items(c.get("PrivateData"))}:
        f.warn("private_data", f"PrivateData is {c.get('PrivateData') or '(null)'}, without "
               "cloud: sinfo hides powered-down cloud nodes (`slurmscale slurm-conf` renders "
               "it)")
    return f.out


def _check_topology(cfg: Config, c: dict[str, str]) -> list[Problem]:
    """`topology:`: Slurm runs the configured plugin (topology/block from 23.11) and
    SlurmUser (the daemon's user) can rewrite the file (docs/topology.md, "Set-up")."""
    f = _Found()
    path = cfg.topology_file()
    if path is None or cfg.topology is None:
        return f.out
    want = f"topology/{cfg.topology.plugin}"
    plugin = c.get("TopologyPlugin", "(null)")
    release = release_of(c.get("SLURM_VERSION", ""))
    if cfg.topology.plugin == "block" and release is not None and release < BLOCK_PLUGIN:
        f.err("topology_plugin", f"topology.plugin block needs Slurm 23.11 or later (this is "
              f"{release[0]}.{release[1]:02d}): use plugin tree")
    elif plugin != want:
        f.err("topology_plugin", f"TopologyPlugin is {plugin}, expected {want} (the "
              "config's topology:): slurm-conf renders it; restart slurmctld after the change")
    user = slurm_user(c.get("SlurmUser", "slurm"))
    if not Path(path).exists():
        f.err("topology_file", f"{path} does not exist: `slurmscale slurm-conf --topology` "
              f"writes the first one, owned by SlurmUser")
    elif user is not None and (why := may(user, Path(path), W)):
        f.err("topology_file", f"SlurmUser {user.name} cannot write {path} (the daemon "
              f"rewrites it as instances come and go): {why}")
    return f.out


class _Found:
    """Problems as they are found."""

    def __init__(self) -> None:
        self.out: list[Problem] = []

    def err(self, code: str, msg: str) -> None:
        self.out.append(Problem("error", code, msg))

    def warn(self, code: str, msg: str) -> None:
        self.out.append(Problem("warning", code, msg))


def _check_pools(cfg: Config, view: SlurmView) -> list[Problem]:
    f = _Found()
    err = f.err
    for p in cfg.pools:
        if p.partition not in view.partitions:
            err("partition_missing", f"pool {p.name}: partition {p.partition} is not in "
                "Slurm (add `slurmscale slurm-conf` output to slurm.conf)")
        names = expand(p.node_range())
        missing = [n for n in names if n not in view.nodes]
        if missing:
            err("nodes_missing", f"pool {p.name}: {len(missing)} of {len(names)} nodes are not "
                f"in Slurm (first: {missing[0]}); once slurm.conf has them, "
                f"{apply_nodes(release_of(view.config.get('SLURM_VERSION', '')))}")
        not_cloud = [n for n in names if n in view.nodes and "CLOUD" not in view.nodes[n]]
        if not_cloud:
            err("nodes_not_cloud", f"pool {p.name}: {not_cloud[0]} is not State=CLOUD "
                f"({view.nodes[not_cloud[0]]}); Slurm will not power it up or down")

    return f.out


def _check_release(c: dict[str, str]) -> list[Problem]:
    f = _Found()
    warn = f.warn
    release = release_of(c.get("SLURM_VERSION", ""))
    if release is not None and release >= REQUEUE_ON_RESUME_FAILURE and \
            "requeue_on_resume_failure" not in c.get("SchedulerParameters", ""):
        warn("requeue_on_resume_failure", f"Slurm {release[0]}.{release[1]:02d} can requeue "
             "the batch jobs of a node that misses ResumeTimeout itself: add "
             "requeue_on_resume_failure to SchedulerParameters (`slurmscale slurm-conf` "
             "renders it); slurmscale's ResumeFailProgram hook does it meanwhile")

    return f.out


def _check_hooks(cfg: Config, c: dict[str, str], config_path: Path) -> list[Problem]:
    f = _Found()
    err = f.err
    user = slurm_user(c.get("SlurmUser", "slurm"))
    if user is None:
        err("slurm_user", f"SlurmUser {c.get('SlurmUser', '?')!r} does not exist here")
    for key, script in HOOKS.items():
        want = str(Path(cfg.hooks_dir) / script)
        got = c.get(key, "(null)")
        if got != want:
            err("hook_program", f"{key} is {got}, expected {want}")
        elif user is not None and (why := may(user, Path(want), X | R)):
            err("hook_not_executable", f"{key} {want}: SlurmUser {user.name} cannot run it: "
                f"{why}")
    if user is not None:
        if why := may(user, config_path, R):
            err("config_unreadable", f"SlurmUser {user.name} cannot read {config_path} (the "
                f"hooks load it): {why}")
        spool = Path(cfg.spool_dir)
        target = spool if spool.exists() else spool.parent
        if why := may(user, target, W | X):
            err("spool_not_writable", f"SlurmUser {user.name} cannot write {target} (the "
                f"hooks record requests there): {why}")

    return f.out


def _check_timers(cfg: Config, c: dict[str, str]) -> list[Problem]:
    f = _Found()
    err, warn = f.err, f.warn
    resume = seconds(c.get("ResumeTimeout", ""))
    slowest = max(cfg.pools, key=lambda p: p.boot_time_s)
    if resume is None or resume <= slowest.boot_time_s:
        err("resume_timeout", f"ResumeTimeout {c.get('ResumeTimeout', 'unset')} is not longer "
            f"than pool {slowest.name}'s boot time ({slowest.boot_time_s:g} s): Slurm would "
            "give up on nodes still booting")
    elif resume != cfg.power_saving.resume_timeout:
        warn("resume_timeout_mismatch", f"Slurm's ResumeTimeout is {resume} s, the config's "
             f"power_saving.resume_timeout {cfg.power_saving.resume_timeout} s (the daemon "
             "paces its EC2 retries by the config's): render slurm.conf again")
    suspend = seconds(c.get("SuspendTime", ""))
    longest = max(p.policy.max_idle_s for p in cfg.pools)
    if suspend is None or suspend < 0:
        err("suspend_time", f"SuspendTime is {c.get('SuspendTime', 'unset')}: power saving "
            "is off, Slurm will never run SuspendProgram")
    elif suspend <= longest:
        err("suspend_time", f"SuspendTime {suspend} s is not longer than the longest "
            f"policy.max_idle_s ({longest:g} s): Slurm would power nodes down before the "
            "policy decides")
    elif cfg.reservations.enabled and suspend <= cfg.reservations.max_hold_s and \
            "SuspendExcStates" not in c:
        # 23.02+ (which added SuspendExcStates) lets the daemon list a hold's nodes in
        # SuspendExcNodes as it gathers them; before it, only a long SuspendTime keeps them up
        err("suspend_time_hold", f"SuspendTime {suspend} s is not longer than "
            f"reservations.max_hold_s ({cfg.reservations.max_hold_s:g} s) and this Slurm "
            "(before 23.02) cannot exclude held nodes from power saving at run time: it "
            "would power down a hold's idle nodes before its gang starts")
    if c.get("JobRequeue", "1") != "1":
        warn("job_requeue", f"JobRequeue is {c.get('JobRequeue')}: jobs on a failed launch or "
             "an interrupted spot node fail instead of requeueing")
    have = {v.strip() for v in c.get("SlurmctldParameters", "").split(",") if v.strip()}
    if "idle_on_node_suspend" not in have:
        warn("idle_on_node_suspend", "SlurmctldParameters lacks idle_on_node_suspend: nodes "
             "powered down after a failure stay DOWN")
    lost = [v for v in ctld_parameters(cfg) if v != "idle_on_node_suspend" and v not in have]
    if lost:  # (a later SlurmctldParameters line in slurm.conf replaced slurmscale's)
        f.err("ctld_parameters", f"SlurmctldParameters lacks {', '.join(lost)} "
              "(slurm.configless / slurm.ctld_parameters ask for it): Slurm keeps only the "
              "last SlurmctldParameters line, so merge them into one (`slurmscale slurm-conf` "
              "renders it)")
    age = seconds(c.get("MinJobAge", ""))
    if age is not None and age < MIN_JOB_AGE_S:
        warn("min_job_age", f"MinJobAge is {age} s: Slurm forgets an ended job before the "
             f"reports' once-a-minute read (keep it >= {MIN_JOB_AGE_S} s, 300 by default) "
             "and jobs shorter than a pass go uncounted")
    return f.out


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


def gather(cfg: Config) -> SlurmView:
    """Read the running Slurm (raises SlurmError when it does not answer)."""
    from slurmscale.slurm.cli_backend import SlurmCLI

    s = SlurmCLI(cfg.slurm)
    config = parse_show_config(s.scontrol("show", "config"))
    parts = {parse_oneliner(line).get("PartitionName", "")
             for line in s.scontrol("show", "partition", "-o").splitlines() if line.strip()}
    nodes, sizes = {}, {}
    for line in s.scontrol("show", "node", "-o").splitlines():  # (one read: state and size)
        kv = parse_oneliner(line)
        if kv.get("NodeName"):
            nodes[kv["NodeName"]] = kv.get("State", "")
            sizes[kv["NodeName"]] = (kv.get("CPUTot", ""), kv.get("RealMemory", ""),
                                     kv.get("Gres", ""))
    site: dict[str, list[str]] | None = None
    site_error = ""
    conf = config.get("SLURM_CONF", "")
    try:  # (the file slurmctld reads, as this host sees it)
        site = read_site(Path(conf)) if conf else None
    except SiteConfError as e:
        site_error = f"cannot read the site's slurm.conf: {e}"
    return SlurmView(config, parts - {""}, nodes, sizes, site, site_error)
