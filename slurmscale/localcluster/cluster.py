"""A real Slurm on this machine with CLOUD nodes backed by the moto EC2 server.

Starts munge, slurmctld, the moto server, the slurmscale daemon, a loopback instance metadata
service and the instance agent (which powers "instances" on: each runs slurmscale's node
bootstrap, which learns its node from its tag and starts slurmd as that node). Everything
lives under one directory, ports are chosen free, all traffic stays on loopback, and
everything started is stopped by its PID.

`slurm_root` selects the Slurm: "/" is the host's (Debian 12: 22.05); a debootstrapped
directory runs that tree's Slurm (e.g. Debian 13: 24.11) through `chroot`, with the work
directory and the source tree bind-mounted at the same paths so hooks and daemon agree.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import yaml

from slurmscale import node_init
from slurmscale.cloud.protocol import TAG_POOL
from slurmscale.config import Config, Pool
from slurmscale.config_file import load_config
from slurmscale.hookview import VIEW_NAME
from slurmscale.localcluster.agent import InstanceAgent
from slurmscale.localcluster.files import (
    kill_job_steps,
    slurm_conf_head,
    slurmscale_yaml,
    write_nvidia_smi,
)
from slurmscale.localcluster.imds import InstanceMetadata
from slurmscale.localcluster.options import ClusterOptions
from slurmscale.localcluster.procs import Procs, free_port_range, release_port_range, wait_for
from slurmscale.slurm.kv import parse_oneliner
from slurmscale.slurmconf import render_gres_conf, render_slurm_conf
from slurmscale.slurmconf_site import read_site

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
HOOK_SOURCE = REPO / "resume_suspend"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}


# every launch template version the nodes boot from: IMDSv2, tags in metadata
# (docs/node-image.md); a test adding a version gives it these too
NODE_METADATA = {"HttpTokens": "required", "InstanceMetadataTags": "enabled"}


LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


class ClusterError(RuntimeError):
    """The local cluster cannot start here; the message is one line naming why."""


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


class LocalCluster:
    def __init__(self, root: Path, opts: ClusterOptions | None = None) -> None:
        self.root = root.resolve()
        self.o = opts or ClusterOptions()
        self.name = "ss" + format(os.getpid() ^ (time.time_ns() >> 10), "x")[-8:]
        self.chroot = None if self.o.slurm_root in ("", "/") else Path(self.o.slurm_root)
        self.procs = Procs(self.root / "log")
        self.agent: InstanceAgent | None = None
        self.imds: InstanceMetadata | None = None
        self.moto_url = ""
        self.cfg_path = self.root / "slurmscale.yaml"
        self.conf = self.root / "etc" / "slurm.conf"
        self.slurmscale_conf = self.conf.parent / "slurmscale.conf"  # Included by slurm.conf
        self._mounts: list[Path] = []
        self.cfg: Config | None = None
        self._ports: list[tuple[int, int]] = []  # claimed (base, n), released at stop
        self.metrics_url = ""

    # --- commands --------------------------------------------------------------------
    @property
    def prefix(self) -> list[str]:
        return ["chroot", str(self.chroot)] if self.chroot else []

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(self.conf),
                "LC_ALL": "C", "HOME": str(self.root)}

    def slurm(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """A Slurm command run against this cluster, from its own directory: a batch job's
        working directory, where its slurm-<id>.out goes (not the caller's: a checkout)."""
        p = subprocess.run([*self.prefix, *args], env=self.env(), capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                           cwd=self.root)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def release(self) -> tuple[int, int]:
        """This cluster's Slurm release, (major, minor)."""
        major, minor = self.slurm("scontrol", "--version").split()[-1].split(".")[:2]
        return int(major), int(minor)

    def sbatch(self, *args: str) -> int:
        out = self.slurm("sbatch", "--parsable", *args)
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        out = self.slurm("scontrol", "show", "job", "-o", str(job_id), check=False)
        return parse_oneliner(out.strip()) if out.strip().startswith("JobId=") else {}

    def job_state(self, job_id: int) -> str:
        return self.job(job_id).get("JobState", "")

    def node(self, name: str) -> dict[str, str]:
        out = self.slurm("scontrol", "show", "node", "-o", name, check=False)
        return parse_oneliner(out.strip()) if out.strip().startswith("NodeName=") else {}

    def wait_job(self, job_id: int, states: set[str], timeout: float) -> str:
        def check() -> str | None:
            s = self.job_state(job_id)
            if s in {"FAILED", "NODE_FAIL", "CANCELLED", "TIMEOUT", "BOOT_FAIL"} - states:
                raise AssertionError(f"job {job_id} ended {s}: {self.job(job_id)}")
            return s if s in states else None
        return str(wait_for(f"job {job_id} to reach {sorted(states)}", check, timeout))

    def ec2(self):  # type: ignore[no-untyped-def]
        return boto3.client("ec2", region_name="us-east-1", endpoint_url=self.moto_url,
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def cluster_instances(self, states: tuple[str, ...] = ("pending", "running")) -> list[dict]:
        out = []
        for res in self.ec2().describe_instances(Filters=[
                {"Name": "tag:slurmscale:cluster", "Values": [self.name]},
                {"Name": "instance-state-name", "Values": list(states)}])["Reservations"]:
            out.extend(res["Instances"])
        return out

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> LocalCluster:
        for d in ("etc", "log", "state", "spool", "run", "munge", "gpu", "hooks", "slurmscale"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        # slurmctld (SlurmUser) reaches munged's socket here; the key inside stays root's 0600
        os.chmod(self.root / "munge", 0o755)
        # What SlurmUser writes, as a production install gives it (slurm_conf/systemd/
        # slurmscale.service's directories; Slurm's StateSaveLocation and log): slurmctld's
        # state, pid and log, and the daemon's store, spool, socket and log, which the hooks
        # (run as SlurmUser) write and reach too. Root's processes (slurmd, the instances)
        # write here as root.
        user = pwd.getpwnam(self.o.slurm_user)
        self.slurm_uid, self.slurm_gid = user.pw_uid, user.pw_gid
        self._check_slurm_user_python()
        for d in ("log", "state", "run", "slurmscale"):
            os.chown(self.root / d, self.slurm_uid, self.slurm_gid)
            os.chmod(self.root / d, 0o755)
        try:
            if self.chroot:
                self._mount_chroot()
            self._start_munge()
            self._start_moto()
            self._write_config()
            self._write_slurm_conf()
            self._install_hooks()
            self._start_slurmctld()
            self._start_agent()
            if self.o.start_daemon:
                self.start_daemon(self.o.daemon_env)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_slurm_user_python(self) -> None:
        """The hooks run as SlurmUser with this Python: refuse at once, in one line, when that
        user cannot run it (a venv under a 0700 home: slurmctld's every resume exits 126 and
        a replay waited out ResumeTimeout silently)."""
        probe = subprocess.run([*self.as_slurm_user(), sys.executable, "-c",
                                "import slurmscale.hooks"], cwd="/", capture_output=True,
                               text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            raise ClusterError(f"SlurmUser {self.o.slurm_user} cannot run {sys.executable} "
                               f"with slurmscale ({why[:160]}): the hooks run as that user; "
                               "use a Python and venv it can reach (e.g. under /opt)")

    def stop(self) -> None:
        self._end_jobs()
        if self.agent:
            self.agent.stop()
            self.agent = None
        if self.imds:
            self.imds.stop()
            self.imds = None
        self.procs.stop_all(order=["daemon", "daemon-b", "slurmctld", "moto", "munged"])
        for m in reversed(self._mounts):
            subprocess.run(["umount", "-R", "-l", str(m)], check=False, capture_output=True)
        self._mounts.clear()
        for base, n in self._ports:
            release_port_range(base, n)
        self._ports.clear()

    def _end_jobs(self, timeout: float = 20.0) -> None:
        """Cancel the jobs still queued or running, and wait (up to `timeout`) for them to
        leave their nodes, while the slurmd still run: a batch step's slurmstepd outlives a
        slurmd killed under it (26.05's waits for it for good), so a job left running would
        leave a process behind each time a cluster stops."""
        if not self.procs.running("slurmctld"):
            return
        try:
            jobs = self.slurm("squeue", "-h", "-o", "%i", check=False, timeout=10).split()
            if not jobs:
                return
            self.slurm("scancel", *jobs, check=False, timeout=10)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.slurm(
                    "squeue", "-h", "-t", "R,CG,CF", "-o", "%i", check=False, timeout=10).strip():
                time.sleep(0.25)
        except (OSError, subprocess.SubprocessError):
            pass  # (stopping goes on: what stops the cluster must not fail on its jobs)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _mount_chroot(self) -> None:
        assert self.chroot
        for src, dst in ((Path("/proc"), self.chroot / "proc"),
                         (Path("/sys"), self.chroot / "sys"),  # slurmd 24.11 wants cgroupfs
                         (Path("/dev"), self.chroot / "dev"),
                         (self.root, self.chroot / str(self.root).lstrip("/")),
                         (REPO, self.chroot / str(REPO).lstrip("/"))):
            dst.mkdir(parents=True, exist_ok=True)
            if src == Path("/proc"):
                _run(["mount", "-t", "proc", "proc", str(dst)])
            elif src == Path("/sys"):
                _run(["mount", "--rbind", "--make-rslave", str(src), str(dst)])
            else:
                _run(["mount", "--bind", str(src), str(dst)])
            self._mounts.append(dst)
        shutil.copy("/etc/hosts", self.chroot / "etc" / "hosts")

    def _start_munge(self) -> None:
        m = self.root / "munge"
        key = m / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        # munge's default socket name: a configless slurmd, which knows no AuthInfo before its
        # config arrives, finds it once this directory is mounted at /run/munge (_boot)
        self.munge_socket = m / "munge.socket.2"
        self.procs.start("munged", [*self.prefix, "/usr/sbin/munged", "--force", "-F",
                                    f"--socket={self.munge_socket}", f"--key-file={key}",
                                    f"--pid-file={m / 'munged.pid'}",
                                    f"--log-file={self.root / 'log' / 'munged.log'}",
                                    f"--seed-file={m / 'munged.seed'}"])
        wait_for("munged socket", self.munge_socket.exists, 20)

    def _free_ports(self, n: int) -> int:
        base = free_port_range(n)
        self._ports.append((base, n))
        return base

    def metrics_port(self) -> int:
        """A free port for the daemon's metrics, and the URL they are scraped at."""
        port = self._free_ports(1)
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"
        return port

    def scrape(self) -> str:
        """The daemon's Prometheus metrics, as a scraper reads them."""
        import urllib.request

        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            return str(r.read().decode())

    def _aws_clock(self) -> dict[str, str]:
        """The moto server's environment for `aws_clock_ahead_s`: AWS's clock (its answers'
        Date, launch times) that far ahead of this host's, under libfaketime."""
        if not self.o.aws_clock_ahead_s:
            return {}
        if not LIBFAKETIME.exists():
            raise ClusterError(f"aws_clock_ahead_s needs {LIBFAKETIME} (scripts/setup.sh "
                               "--tests installs libfaketime)")
        return {"LD_PRELOAD": str(LIBFAKETIME),
                "FAKETIME": f"{self.o.aws_clock_ahead_s:+d}s",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def _start_moto(self) -> None:
        if self.o.moto_url:
            self.moto_url = self.o.moto_url.rstrip("/")
            host, port = self.moto_url.split("//", 1)[1].rsplit(":", 1)
        else:
            host, port = "127.0.0.1", str(self._free_ports(1))
            self.moto_url = f"http://{host}:{port}"
            self.procs.start("moto", [sys.executable, "-m", "moto.server", "-H", host,
                                      "-p", port], env={**os.environ, **AWS_ENV,
                                                        **self._aws_clock()})

        def up() -> bool:
            with socket.create_connection((host, int(port)), timeout=1):
                return True
        wait_for("moto server", up, 60)
        ec2 = self.ec2()
        vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
        self.subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.1.0/24",
                                        AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
        self.vpc = vpc
        if self.o.aws_stack:  # (made by the stack, once the config names the pools)
            self.lt_name, self.events_queue_url = "stack-pending", None
            return
        # the nodes' role: the bootstrap tags its own boot failure with it
        iam = boto3.client("iam", region_name="us-east-1", endpoint_url=self.moto_url,
                           **{k.lower(): v for k, v in AWS_ENV.items()
                              if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
        iam.create_role(RoleName=f"{self.name}-node", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole"}]}))
        profile = iam.create_instance_profile(InstanceProfileName=f"{self.name}-node")
        iam.add_role_to_instance_profile(InstanceProfileName=f"{self.name}-node",
                                         RoleName=f"{self.name}-node")
        lt = ec2.create_launch_template(
            LaunchTemplateName=f"{self.name}-gpu",
            LaunchTemplateData={"ImageId": "ami-0a1b2c3d4e5f60718",
                                "InstanceType": self.o.pools[0].instance_type,
                                "IamInstanceProfile": {
                                    "Arn": profile["InstanceProfile"]["Arn"]},
                                # the node learns its name from its tag in metadata
                                "MetadataOptions": NODE_METADATA})
        self.lt_name = lt["LaunchTemplate"]["LaunchTemplateName"]
        # The queue the EventBridge rules fill with EC2 events (tests also send to it), made
        # as docs/aws-stack.md's by-hand path says: its policy lets EventBridge send, and
        # the rules the stack would make target it
        self.events_queue_url = self.sqs().create_queue(
            QueueName=f"{self.name}-ec2-events")["QueueUrl"]
        from slurmscale.stack.template import event_rules, queue_policy

        arn = self.sqs().get_queue_attributes(QueueUrl=self.events_queue_url, AttributeNames=[
            "QueueArn"])["Attributes"]["QueueArn"]
        events = boto3.client("events", region_name="us-east-1", endpoint_url=self.moto_url,
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        rules = []
        for name, pattern in event_rules().items():
            rules.append(events.put_rule(Name=f"{self.name}-{name}",
                                         EventPattern=json.dumps(pattern))["RuleArn"])
            events.put_targets(Rule=f"{self.name}-{name}",
                               Targets=[{"Id": "slurmscale-queue", "Arn": arn}])
        self.sqs().set_queue_attributes(QueueUrl=self.events_queue_url, Attributes={
            "Policy": json.dumps(queue_policy(arn, rules))})

    def sqs(self):  # type: ignore[no-untyped-def]
        return boto3.client("sqs", region_name="us-east-1", endpoint_url=self.moto_url,
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def send_event(self, body: str) -> None:
        """Deliver one message to the EC2 events queue, as EventBridge would."""
        self.sqs().send_message(QueueUrl=self.events_queue_url, MessageBody=body)

    def _write_config(self) -> None:
        data = slurmscale_yaml(self)
        self.cfg_path.write_text(yaml.safe_dump(data, sort_keys=False))
        os.chmod(self.cfg_path, 0o644)  # slurmscale refuses a config others may write
        self.cfg = load_config(self.cfg_path)
        if self.o.aws_stack:
            from slurmscale.localcluster import stack

            self.made_by_hand = stack.deploy(self.cfg, self.cfg_path, self.moto_url,
                                             self.vpc, self.subnet,
                                             self.root / "munge" / "munge.key",
                                             {**os.environ, **AWS_ENV})
            self.cfg = load_config(self.cfg_path)
            self.events_queue_url = self.cfg.aws.interruption_queue_url

    def _write_slurm_conf(self) -> None:
        assert self.cfg
        r = self.root
        total = sum(p.max_nodes for p in self.cfg.pools)
        base = self._free_ports(total + 1)
        self.ctld_port = base
        ports: dict[str, str] = {}
        nxt = base + 1
        for p in self.cfg.pools:
            ports[p.name] = (f"{nxt}-{nxt + p.max_nodes - 1}" if p.max_nodes > 1 else str(nxt))
            nxt += p.max_nodes
        for i in range(8):
            (r / "gpu" / f"gpu{i}").touch()
        head = slurm_conf_head(self)
        extra = "".join(f"{line}\n" for line in self.o.slurm_conf_extra)
        # slurmscale's lines in a file of their own, Included last, keeping the site's values
        # (docs/install.md step 4: `slurmscale slurm-conf --output`)
        ours = self.slurmscale_conf
        self.conf.write_text(head + extra)
        # (for the release that runs, as `slurm-conf` renders by `scontrol --version`)
        body = render_slurm_conf(self.cfg, node_extra=lambda p: f"NodeHostname=localhost "
                                 f"Port={ports[p.name]}", site=read_site(self.conf),
                                 release=self.release())
        ours.write_text(body)
        with self.conf.open("a") as f:
            f.write(f"Include {ours}\n")
        gres = render_gres_conf(
            self.cfg, gpu_files=lambda p: f"{r / 'gpu'}/gpu[0-{p.gpus_per_node - 1}]")
        (self.conf.parent / "gres.conf").write_text(gres)
        topology = self.cfg.topology_file()
        if topology is not None:
            # what `slurmscale slurm-conf --topology` prints, given to SlurmUser (the daemon
            # rewrites it), as docs/topology.md has the admin do
            from slurmscale.topology import render

            assert self.cfg.topology is not None
            Path(topology).write_text(render(
                self.cfg.topology.plugin, [n for p in self.cfg.pools for n in p.node_names()],
                {}))
            os.chown(topology, self.slurm_uid, self.slurm_gid)

    def _install_hooks(self) -> None:
        dst = self.root / "hooks"
        shutil.copy2(HOOK_SOURCE / "slurmscale-hook", dst / "slurmscale-hook")
        for name in ("slurmscale-resume", "slurmscale-suspend", "slurmscale-resume-fail"):
            link = dst / name
            if not link.is_symlink():
                link.symlink_to("slurmscale-hook")
        if self.chroot:
            env = {"SLURMSCALE_PYTHON": "/usr/bin/python3", "PYTHONPATH": str(REPO)}
        else:
            env = {"SLURMSCALE_PYTHON": sys.executable}
        env["SLURMSCALE_CONFIG"] = str(self.cfg_path)
        assert self.cfg is not None, "the config is written before the hooks"
        env["SLURMSCALE_HOOK_VIEW"] = str(Path(self.cfg.spool_dir) / VIEW_NAME)
        (dst / "hooks.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))

    def stop_slurmctld(self) -> None:
        """An outage of the controller (tests): jobs keep running on their slurmd."""
        self.procs.stop("slurmctld")

    def start_slurmctld(self) -> None:
        self._start_slurmctld()  # state is recovered from StateSaveLocation

    def _start_slurmctld(self) -> None:
        self.procs.start("slurmctld", [*self.prefix, "/usr/sbin/slurmctld", "-D", "-i",
                                       "-f", str(self.conf)], env=self.env())
        wait_for("slurmctld to answer", lambda: self.slurm("scontrol", "ping", check=False)
                 .count("is UP"), 60)

    def break_gpu(self, node: str, boots: int = 1) -> None:
        """The next `boots` instances to boot as `node` see one GPU fewer than promised."""
        (self.root / "gpu" / f"broken-{node}").write_text(f"{boots}\n")

    def _boot(self, instance_id: str) -> subprocess.Popen[bytes]:
        """What runs on an instance at power-on: slurmscale's node bootstrap, reading the
        instance's own metadata (the emulator), joining as the node its tag names, or
        tagging its failure. The pool tag (set at launch) picks that pool's user data."""
        assert self.imds and self.cfg
        tags = {t["Key"]: t["Value"] for r in self.ec2().describe_instances(
            InstanceIds=[instance_id])["Reservations"] for i in r["Instances"]
            for t in i.get("Tags", [])}
        pool = self.cfg.pool(tags[TAG_POOL])
        cmd = [sys.executable, node_init.__file__, "--cluster", self.name,
               *self._slurmd_source(instance_id),
               "--gpus", str(pool.gpus_per_node), "--nvidia-smi", str(self.nvidia_smi),
               "--tag-timeout", str(self.o.tag_timeout)]
        if self.cfg.aws.munge_key_parameter:  # (the cluster's key file: compared, kept)
            cmd += ["--munge-key-parameter", self.cfg.aws.munge_key_parameter,
                    "--munge-key-file", str(self.root / "munge" / "munge.key"),
                    "--munge-restart", ""]
        cmd += ["--foreground", "--", "-D"]
        # EC2's API as the daemon reaches it (the tests' recording proxy, when there is one)
        api = (self.o.daemon_ec2_endpoint(self.moto_url) if self.o.daemon_ec2_endpoint
               else self.moto_url)
        env = {**self.env(), "AWS_EC2_METADATA_SERVICE_ENDPOINT":
               self.imds.endpoint(instance_id), "AWS_ENDPOINT_URL_EC2": api,
               "SLURMSCALE_LOCAL_GPUS": str(pool.gpus_per_node),
               "AWS_ENDPOINT_URL_SSM": self.moto_url}
        if self.o.configless:
            del env["SLURM_CONF"]  # (it would win over --conf-server)
        return self.procs.start(f"boot-{instance_id}", cmd, env=env)

    def _template_of(self, inst: dict[str, Any]) -> tuple[str, str] | None:
        """The template version an instance was launched from: its pool's (by its pool tag;
        a pool's reserved-capacity version is not told apart)."""
        assert self.cfg
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        try:
            lt = self.cfg.pool(tags.get(TAG_POOL, "")).launch_template
        except KeyError:
            return None
        ref = lt.id or lt.name
        return (ref, lt.version) if ref else None

    def _slurmd_source(self, instance_id: str) -> list[str]:
        """How the instance's slurmd gets its config: the cluster's slurm.conf, or configless
        from slurmctld. Configless, this machine's "instances" share one /run: each slurmd
        gets a private mount namespace with the cluster's munge directory at /run/munge (the
        default socket a slurmd without a config uses) and a /run/slurm of its own (where it
        caches the fetched config), as a real instance has both to itself."""
        slurmd = " ".join([*self.prefix, "/usr/sbin/slurmd"])
        if not self.o.configless:
            return ["--slurm-conf", str(self.conf), "--slurmd", slurmd]
        base = self.chroot or Path("/")
        run = self.root / "run" / instance_id
        run.mkdir(parents=True, exist_ok=True)
        for d in ("run/munge", "run/slurm"):
            (base / d).mkdir(parents=True, exist_ok=True)
        script = (f"mount --bind {self.root / 'munge'} {base / 'run/munge'} && "
                  f"mount --bind {run} {base / 'run/slurm'} && exec {slurmd} \"$@\"")
        wrapper = f"unshare --mount --propagation private sh -c '{script}' slurmd"
        return ["--conf-server", f"127.0.0.1:{self.ctld_port}", "--slurmd", wrapper]

    def _start_agent(self) -> None:
        assert self.cfg
        for node in (n for p in self.cfg.pools for n in p.node_names()):
            (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
        self.nvidia_smi = write_nvidia_smi(self.root)
        self.imds = InstanceMetadata(self.ec2(), self._template_of).start()
        self.agent = InstanceAgent(self.ec2(), self.name, self.o.boot_delay, self._boot,
                                   on_halt=functools.partial(kill_job_steps, self.root),
                                   clock_ahead_s=self.o.aws_clock_ahead_s)
        self.agent.start()

    def start_daemon(self, extra_env: dict[str, str] | None = None, name: str = "daemon",
                     wait: bool = True) -> Path:
        """Start a daemon; one named other than "daemon" gets its own config copy with its own
        socket and log (a second daemon on the same store, as an HA pair would run)."""
        cfg_path, sock = self.cfg_path, self.root / "run" / "slurmscale.sock"
        if name != "daemon":
            sock = self.root / "run" / f"{name}.sock"
            data = yaml.safe_load(self.cfg_path.read_text())
            data.update(socket_path=str(sock),
                        log_file=str(self.root / "log" / f"slurmscale-{name}.log"))
            cfg_path = self.root / f"slurmscale-{name}.yaml"
            cfg_path.write_text(yaml.safe_dump(data, sort_keys=False))
            os.chmod(cfg_path, 0o644)
        env = {**os.environ, **AWS_ENV, "SLURMSCALE_CONFIG": str(cfg_path),
               **(extra_env or {})}
        # a preloaded library (libfaketime) is the daemon's, loaded after the switch to
        # SlurmUser: in setpriv (root) it makes state SlurmUser cannot open
        preload = env.pop("LD_PRELOAD", None)
        after = ["/usr/bin/env", f"LD_PRELOAD={preload}"] if preload else []
        sock.unlink(missing_ok=True)  # a socket left by a killed daemon proves nothing
        self.procs.start(name, [*self.o.daemon_prefix, *self.as_slurm_user(), *after,
                                sys.executable, "-m", "slurmscale", "--config", str(cfg_path),
                                "daemon"], env=env)

        def up() -> bool:
            if not self.procs.running(name):
                raise RuntimeError(f"slurmscale {name} exited; see log/{name}.out")
            return sock.is_socket()
        if wait:
            wait_for(f"slurmscale {name} socket", up, 60)
        return sock

    def as_slurm_user(self) -> list[str]:
        """The prefix that runs a command as the shipped unit runs the daemon: SlurmUser, its
        group and supplementary groups (User=, Group=). A chroot's Slurm is reached through
        `chroot`, so there the command keeps CAP_SYS_CHROOT (ambient, as nothing on a real
        cluster needs: there the Slurm commands are the host's) and nothing else."""
        caps = (["--inh-caps=+sys_chroot", "--ambient-caps=+sys_chroot"] if self.chroot
                else [])
        return ["/usr/bin/setpriv", f"--reuid={self.slurm_uid}", f"--regid={self.slurm_gid}",
                "--init-groups", *caps, "--"]

    def stop_daemon(self, name: str = "daemon") -> None:
        self.procs.stop(name)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **AWS_ENV}
        return subprocess.run([sys.executable, "-m", "slurmscale", "--config",
                               str(self.cfg_path), *args], env=env, capture_output=True,
                              text=True, timeout=60)

    def events(self) -> list[dict[str, Any]]:
        p = self.cli("events", "--json", "--limit", "5000")
        if p.returncode != 0:
            raise RuntimeError(p.stderr)
        return list(json.loads(p.stdout)["events"])

    def pool(self, name: str) -> Pool:
        assert self.cfg
        return self.cfg.pool(name)
