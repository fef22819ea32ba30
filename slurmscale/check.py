"""`slurmscale check`: the config against the running Slurm, one line per problem.

What it compares: every pool's partition and CLOUD nodes exist; slurm.conf's power-saving
hooks are slurmscale's and SlurmUser may run them; SlurmUser may read the config and write the
spool; ResumeTimeout outlasts every pool's boot time (and matches the config, whose daemon
gives up on a silent EC2 at half of it); SuspendTime is the backstop behind the policy's idle
limits (and, before Slurm 23.02, the longest hold); the settings slurmscale relies on
(JobRequeue, idle_on_node_suspend) are on, and Slurm remembers ended jobs long enough for
the reports (MinJobAge).

EC2's launch path (templates, reservations, shapes, DNS, subnets) is check_launch.py's; the
other AWS pieces check_aws.py's; Slurm's node lines check_node_lines.py's; the hooks run as
SlurmUser check_hooks.py's.

The checks are pure functions of what Slurm printed, what EC2 stores and what the filesystem
says, so each misconfiguration has a unit test; `gather` reads the real thing."""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from slurmscale.config import Config
from slurmscale.hostlists import expand
from slurmscale.slurm.kv import parse_oneliner, parse_show_config, release_of
from slurmscale.slurmconf import (
    BLOCK_PLUGIN,
    REQUEUE_ON_RESUME_FAILURE,
    apply_nodes,
    ctld_parameters,
    expedites,
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
    return (_check_pools(cfg, view) + _check_site(cfg, view) + _check_release(cfg, c)
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


def _ctld(c: dict[str, str]) -> set[str]:
    """The SlurmctldParameters the running Slurm has."""
    return set(items(c.get("SlurmctldParameters")))


def _check_release(cfg: Config, c: dict[str, str]) -> list[Problem]:
    f = _Found()
    warn = f.warn
    release = release_of(c.get("SLURM_VERSION", ""))
    if expedites(cfg, release) and "enable_expedited_requeue" not in _ctld(c):
        warn("expedited_requeue", "SlurmctldParameters lacks enable_expedited_requeue: jobs "
             "submitted with --requeue=expedite that slurmscale requeues wait their turn "
             "(render slurm.conf again: `slurmscale slurm-conf --output`, then `scontrol "
             "reconfigure`; slurm.expedited_requeue: false says the site does not want it)")
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
    have = _ctld(c)
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
