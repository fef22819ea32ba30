#!/usr/bin/env python3
"""slurmscale node-init: what an instance slurmscale launched runs at boot to join Slurm as
the node it was launched for. Stdlib only (Python 3.8+), gzipped into the user data (EC2's
16 KB limit is on that); `slurmscale node-init` runs this same code. docs/node-image.md has
the whole story.

1. Instance metadata by IMDSv2 (PUT a token, GETs carrying it): id, type, AZ, region, tags;
   at 169.254.169.254 unless AWS_EC2_METADATA_SERVICE_ENDPOINT says otherwise (as botocore).
2. Waits for its `slurmscale:node` tag (the daemon tags each instance right after CreateFleet
   answers) until --tag-timeout; checks `slurmscale:cluster` against --cluster.
3. With --munge-key-parameter: the cluster's munge key from that SSM SecureString (GetParameter
   with decryption, signed with the instance role's credentials), written where munged reads
   it and munged restarted when it changed; the node cannot authenticate to slurmctld without it.
   Pre-flight: `nvidia-smi -L` must list the --gpus the pool promises; --check-program.
4. Starts `slurmd -N <node> -b`, configless (--conf-server) or with --slurm-conf, plus the
   arguments after `--`; --foreground execs slurmd in its place.
5. On any failure it does not join: it tags its own instance `slurmscale:boot-error` =
   "<cause>: <what>" (CreateTags signed with the instance role's credentials), which the
   daemon answers on its next pass with a fresh instance; one line on stderr; exit 1 (2: bad
   arguments). A tag, not a Slurm drain: the failures that matter most (munge, an unreachable
   controller, a release mismatch) are those in which the node cannot reach slurmctld.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

TAG_CLUSTER = "slurmscale:cluster"
TAG_NODE = "slurmscale:node"
TAG_BOOT_ERROR = "slurmscale:boot-error"
# once slurmd started: when each boot step ended (Unix s), for `slurmscale report`
TAG_BOOT_TIMES = "slurmscale:boot-times"
BOOT_STEPS = ("os", "start", "tag", "checked", "slurmd")
IMDS = "http://169.254.169.254/"
TOKEN_TTL_S = 21600
PREFIX = "slurmscale-node-init: "


class BootError(Exception):
    """A failure that keeps this instance out of Slurm; `cause` is a short word the daemon
    counts by (metadata, tag-timeout, wrong-cluster, gpu-check, health-check, slurmd)."""

    def __init__(self, cause: str, what: str) -> None:
        super().__init__(what)
        self.cause = cause
        self.what = what


class Metadata:
    """IMDSv2: one token (renewed on 401 or before it expires), GETs carrying it."""

    def __init__(self, endpoint: str | None = None, timeout: float = 2.0,
                 ttl: int = TOKEN_TTL_S) -> None:
        base = endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or IMDS
        self.base = base if base.endswith("/") else base + "/"
        self.timeout = timeout
        self.ttl = ttl
        self.token = ""
        self.token_until = 0.0

    # a failed request is tried again this many times, after these pauses, as the AWS SDKs'
    # IMDS clients do (SDKs and Tools Reference Guide, "IMDS client": 3 retries by default):
    # a slow or throttled answer is no reason to give up a node's boot
    RETRY_PAUSES_S = (0.5, 1.0, 2.0)

    def _open(self, req: urllib.request.Request) -> bytes:
        for pause in (*self.RETRY_PAUSES_S, None):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310
                    return bytes(r.read())
            except urllib.error.HTTPError as e:
                if pause is None or not (e.code == 429 or e.code >= 500):
                    raise  # (a refusal, 401 and 404 among them, will not change)
            except (urllib.error.URLError, OSError):
                if pause is None:
                    raise
            time.sleep(pause)
        raise AssertionError("not reached")

    def _token(self) -> str:
        if self.token and time.monotonic() < self.token_until:
            return self.token
        req = urllib.request.Request(self.base + "latest/api/token", method="PUT", headers={
            "X-aws-ec2-metadata-token-ttl-seconds": str(self.ttl)})
        self.token = self._open(req).decode().strip()
        self.token_until = time.monotonic() + self.ttl * 0.9
        return self.token

    def get(self, path: str) -> str | None:
        """The value at latest/meta-data/<path>, or None where metadata has none (404)."""
        for attempt in (1, 2):
            req = urllib.request.Request(self.base + "latest/meta-data/" + path, headers={
                "X-aws-ec2-metadata-token": self._token()})
            try:
                return self._open(req).decode()
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None
                if e.code == 401 and attempt == 1:  # the token expired or was refused
                    self.token = ""
                    continue
                raise
        return None  # not reached

    def need(self, path: str) -> str:
        v = self.get(path)
        if v is None:
            raise BootError("metadata", f"instance metadata has no {path}")
        return v.strip()


def until_ready(md: Metadata, deadline: float) -> None:
    """Early in boot metadata may not answer yet: retried until `deadline`; a refusal (403,
    404) will not change, and fails at once."""
    last = ""
    while True:
        try:
            md.need("instance-id")
            return
        except urllib.error.HTTPError as e:
            if e.code in (400, 403, 404, 405):
                raise BootError("metadata", f"instance metadata at {md.base} refused: HTTP "
                                f"{e.code} {e.reason}") from None
            last = f"HTTP {e.code} {e.reason}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        if time.monotonic() >= deadline:
            raise BootError("metadata", f"instance metadata at {md.base} did not answer: {last}")
        time.sleep(0.5)


# tags/instance is 404 with tags disabled and while there are none: waited this long
TAGS_GRACE_S = 10.0
NODE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,62}")


def wait_for_node(md: Metadata, cluster: str | None, timeout: float,
                  poll: float = 0.5) -> str:
    """The node tag's value once the daemon wrote it; with `cluster`, the instance must be
    tagged for it (at launch)."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        keys = md.get("tags/instance")
        have = set(keys.split()) if keys is not None else set()
        if keys is None and time.monotonic() - start >= min(TAGS_GRACE_S, timeout):
            raise BootError("metadata", f"no instance tags in metadata after "
                            f"{min(TAGS_GRACE_S, timeout):g}s: the launch template needs "
                            "MetadataOptions InstanceMetadataTags=enabled")
        if cluster is not None and TAG_CLUSTER in have:
            theirs = md.need("tags/instance/" + TAG_CLUSTER)
            if theirs != cluster:
                raise BootError("wrong-cluster", f"instance is tagged for cluster {theirs!r}, "
                                f"this node-init for {cluster!r}")
        if TAG_NODE in have and (cluster is None or TAG_CLUSTER in have):
            node = (md.get("tags/instance/" + TAG_NODE) or "").strip()
            if node and not NODE_NAME.fullmatch(node):
                raise BootError("metadata", f"the {TAG_NODE} tag {node[:80]!r} is not a Slurm "
                                "node name")
            if node:
                return node
        if time.monotonic() >= deadline:
            if cluster is not None and TAG_NODE in have:
                raise BootError("wrong-cluster", f"no {TAG_CLUSTER} tag")
            raise BootError("tag-timeout", f"no {TAG_NODE} tag after {timeout:g}s")
        time.sleep(poll)


def run_or_fail(cause: str, argv: list[str], env: dict[str, str] | None,
                timeout: float) -> subprocess.CompletedProcess[str]:
    """`argv` run to its end; one that cannot start, times out or exits non-zero is the boot
    failure `cause`, with its last line of stderr (else stdout)."""
    what = " ".join(argv)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BootError(cause, f"{what}: {e}") from None
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        raise BootError(cause, f"{what} exited {p.returncode}" + (f": {err[-1]}" if err else ""))
    return p


def check_gpus(nvidia_smi: str, want: int, env: dict[str, str] | None = None,
               timeout: float = 60.0) -> None:
    p = run_or_fail("gpu-check", [nvidia_smi, "-L"], env, timeout)
    n = sum(1 for line in p.stdout.splitlines() if line.startswith("GPU "))
    if n != want:
        raise BootError("gpu-check", f"{n} GPU(s) seen by {nvidia_smi}, the pool promises {want}")


def run_check(program: str, env: dict[str, str], timeout: float = 300.0) -> None:
    try:
        p = subprocess.run(shlex.split(program), capture_output=True, text=True, env=env,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BootError("health-check", f"{program}: {e}") from None
    if p.returncode != 0:
        out = (p.stdout.strip() + "\n" + p.stderr.strip()).strip().splitlines()
        raise BootError("health-check", f"{program} exited {p.returncode}"
                        + (f": {out[-1]}" if out else ""))


# --- reporting: EC2 CreateTags, SigV4-signed with the instance role's credentials ---------
def credentials(md: Metadata | None) -> tuple[str, str, str]:
    """(key, secret, session token): the environment's, else the instance role's."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return key, secret, os.environ.get("AWS_SESSION_TOKEN", "")
    if md is None:
        raise BootError("report", "no AWS credentials")
    roles = (md.get("iam/security-credentials/") or "").split()
    if not roles:
        raise BootError("report", "the instance has no IAM role")
    c = json.loads(md.need("iam/security-credentials/" + roles[0]))
    return c["AccessKeyId"], c["SecretAccessKey"], c.get("Token", "")


def ec2_endpoint(region: str) -> str:
    return (os.environ.get("AWS_ENDPOINT_URL_EC2") or os.environ.get("AWS_ENDPOINT_URL")
            or f"https://ec2.{region}.amazonaws.com/")


FORM = "application/x-www-form-urlencoded; charset=utf-8"


def sigv4_headers(url: str, body: bytes, region: str, creds: tuple[str, str, str],
                  now: datetime.datetime, service: str = "ec2", content_type: str = FORM,
                  extra: dict[str, str] | None = None) -> dict[str, str]:
    """AWS Signature Version 4 for a POST (the AWS General Reference's "Create a signed AWS
    API request"): canonical request, string to sign, derived key. A form body (EC2's query
    API) or, with `content_type` and `extra` headers, a JSON one (SSM's X-Amz-Target API)."""
    key, secret, token = creds
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    u = urllib.parse.urlsplit(url)
    headers = {"content-type": content_type, "host": u.netloc, "x-amz-date": amz_date,
               **{k.lower(): v for k, v in (extra or {}).items()}}
    if token:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    signed = ";".join(names)
    canonical = "\n".join([
        "POST", urllib.parse.quote(u.path or "/", safe="/~"), u.query,
        "".join(f"{n}:{headers[n].strip()}\n" for n in names), signed,
        hashlib.sha256(body).hexdigest()])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{scope}, "
                                f"SignedHeaders={signed}, Signature={sig}")
    return headers


def report(md: Metadata | None, instance_id: str, region: str, err: BootError) -> None:
    """Tag this instance with the failure, where the daemon reads it on its next pass."""
    tag_self(md, instance_id, region, TAG_BOOT_ERROR, f"{err.cause}: {err.what}"[:256])


def boot_times(steps: dict[str, float]) -> str:
    return ",".join(f"{k}={steps[k]:.2f}" for k in BOOT_STEPS if k in steps)


def kernel_started(now: float) -> float | None:
    try:
        with open("/proc/uptime", encoding="ascii") as f:
            return now - float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tag_self(md: Metadata | None, instance_id: str, region: str, key: str,
             value: str) -> None:
    body = urllib.parse.urlencode({
        "Action": "CreateTags", "Version": "2016-11-15", "ResourceId.1": instance_id,
        "Tag.1.Key": key, "Tag.1.Value": value}).encode()
    url = ec2_endpoint(region)
    headers = sigv4_headers(url, body, region, credentials(md),
                            datetime.datetime.now(datetime.timezone.utc))  # noqa: UP017 (3.8)
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
        r.read()


# --- the munge key: SSM GetParameter (JSON protocol), SigV4-signed like the tag --------------
def ssm_endpoint(region: str) -> str:
    return (os.environ.get("AWS_ENDPOINT_URL_SSM") or os.environ.get("AWS_ENDPOINT_URL")
            or f"https://ssm.{region}.amazonaws.com/")


def munge_key(md: Metadata | None, region: str, name: str) -> bytes:
    """The munge key held base64-encoded in the SecureString `name` (SSM API reference,
    GetParameter with WithDecryption; the instance role may read only that parameter)."""
    body = json.dumps({"Name": name, "WithDecryption": True}).encode()
    url = ssm_endpoint(region)
    try:
        headers = sigv4_headers(url, body, region, credentials(md),
                                datetime.datetime.now(datetime.timezone.utc),  # noqa: UP017
                                service="ssm", content_type="application/x-amz-json-1.1",
                                extra={"X-Amz-Target": "AmazonSSM.GetParameter"})
        req = urllib.request.Request(url, data=body, method="POST", headers=headers)
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
            answer = json.loads(r.read())
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:200]
        raise BootError("munge-key", f"reading parameter {name}: HTTP {e.code} {detail}") \
            from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise BootError("munge-key", f"reading parameter {name}: {e}") from None
    except BootError as e:
        raise BootError("munge-key", f"reading parameter {name}: {e.what}") from None
    try:
        key = base64.b64decode(answer["Parameter"]["Value"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise BootError("munge-key", f"parameter {name} does not hold a base64 munge key "
                        "(put it with `base64 -w0 /etc/munge/munge.key`)") from None
    if len(key) < 32:  # munge(7): a key is at least 32 bytes
        raise BootError("munge-key", f"parameter {name} holds {len(key)} bytes; a munge key "
                        "has at least 32")
    return key


def install_munge_key(key: bytes, path: str, restart: str) -> bool:
    """Write the key (0400, munged's user where it exists) unless it is already there;
    restart munged if it changed. True when it changed."""
    try:
        with open(path, "rb") as f:
            if f.read() == key:
                return False
    except OSError:
        pass
    tmp = path + ".slurmscale-new"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        try:
            import pwd

            pw = pwd.getpwnam("munge")
            os.chown(tmp, pw.pw_uid, pw.pw_gid)
        except KeyError:
            pass
        os.replace(tmp, path)
    except OSError as e:
        raise BootError("munge-key", f"writing {path}: {e}") from None
    if restart:
        run_or_fail("munge-key", shlex.split(restart), None, 60)
    return True


# --- the boot ------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="slurmscale-node-init", description=(
        "Join Slurm as the node this instance was launched for (its slurmscale:node tag)."))
    p.add_argument("--cluster", help="refuse an instance tagged for another cluster")
    p.add_argument("--conf-server", action="append", default=[],
                   help="host[:port] of slurmctld (configless; repeat for backups)")
    p.add_argument("--slurm-conf", help="a local slurm.conf instead of --conf-server")
    p.add_argument("--slurmd", default="/usr/sbin/slurmd",
                   help="the slurmd command (split like a shell would)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs the pool promises (0: no check)")
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    p.add_argument("--check-program", help="the site's health check, run before joining")
    p.add_argument("--munge-key-parameter",
                   help="an SSM SecureString holding the munge key (base64), read at boot")
    p.add_argument("--munge-key-file", default="/etc/munge/munge.key")
    p.add_argument("--munge-restart", default="systemctl restart munge",
                   help="run when the key changed ('' for none)")
    p.add_argument("--tag-timeout", type=float, default=600.0,
                   help="seconds to wait for the node tag (keep it below ResumeTimeout)")
    p.add_argument("--metadata-timeout", type=float, default=60.0)
    p.add_argument("--foreground", action="store_true",
                   help="exec slurmd in this process's place")
    p.add_argument("--no-report", action="store_true",
                   help="do not tag a failure, nor the boot's times")
    p.add_argument("slurmd_args", nargs="*", help="after --: more slurmd arguments")
    a = p.parse_args(argv)
    if a.gpus < 0:
        p.error(f"--gpus must be 0 or more, got {a.gpus}")
    if a.slurm_conf and a.conf_server:
        p.error("give --slurm-conf or --conf-server, not both")
    return a


def say(msg: str) -> None:
    at = datetime.datetime.now(datetime.timezone.utc).isoformat(  # noqa: UP017 (3.8)
        timespec="milliseconds")
    print(f"{PREFIX}{at} {msg}", flush=True)


def instance_args(slurmd: list[str], facts: dict[str, str]) -> list[str]:
    """slurmd 23.02+ reports its instance id and type when it registers (given these; else
    its registration may clear what the daemon wrote into the node record)."""
    try:
        h = subprocess.run([*slurmd, "--help"], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if "--instance-id" not in h.stdout + h.stderr:
        return []
    return ["--instance-id", facts["instance_id"], "--instance-type", facts["instance_type"]]


def slurmd_argv(a: argparse.Namespace, node: str, facts: dict[str, str]) -> list[str]:
    slurmd = shlex.split(a.slurmd)
    argv = [*slurmd, "-N", node, "-b", *instance_args(slurmd, facts)]
    if a.conf_server:
        argv += ["--conf-server", ",".join(a.conf_server)]
    if a.slurm_conf:
        argv += ["-f", a.slurm_conf]
    return argv + list(a.slurmd_args)


def boot(a: argparse.Namespace, md: Metadata, facts: dict[str, str]) -> None:
    t0 = time.monotonic()
    steps = {"start": time.time()}
    os_start = kernel_started(steps["start"])
    if os_start is not None:
        steps["os"] = os_start
    say("booting")
    until_ready(md, t0 + a.metadata_timeout)
    for key, path in (("instance_id", "instance-id"), ("instance_type", "instance-type"),
                      ("zone", "placement/availability-zone")):
        facts[key] = md.need(path)
    facts["region"] = (md.get("placement/region") or facts["zone"][:-1]).strip()
    node = wait_for_node(md, a.cluster, a.tag_timeout)
    t_tag = time.monotonic()
    steps["tag"] = time.time()
    say(f"{facts['instance_id']} ({facts['instance_type']}, {facts['zone']}) is node {node}: "
        f"tag after {t_tag - t0:.2f}s")
    env = dict(os.environ, SLURMSCALE_NODE=node, SLURMSCALE_INSTANCE_ID=facts["instance_id"],
               SLURMSCALE_INSTANCE_TYPE=facts["instance_type"])
    if a.munge_key_parameter:
        secret = munge_key(md, facts["region"], a.munge_key_parameter)
        changed = install_munge_key(secret, a.munge_key_file, a.munge_restart)
        say(f"munge key from {a.munge_key_parameter}: "
            + ("installed" if changed else "unchanged"))
    if a.gpus:
        check_gpus(a.nvidia_smi, a.gpus, env)
    if a.check_program:
        run_check(a.check_program, env)
    argv = slurmd_argv(a, node, facts)
    steps["checked"] = time.time()
    say(f"checks passed in {time.monotonic() - t_tag:.2f}s; starting {shlex.join(argv)}")
    if a.foreground:
        steps["slurmd"] = time.time()
        tell_times(a, md, facts, steps)
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            raise BootError("slurmd", f"cannot run {argv[0]}: {e}") from None
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BootError("slurmd", f"{argv[0]}: {e}") from None
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        raise BootError("slurmd", f"slurmd exited {p.returncode}" + (f": {err[-1]}" if err else ""))
    steps["slurmd"] = time.time()
    tell_times(a, md, facts, steps)


def tell_times(a: argparse.Namespace, md: Metadata, facts: dict[str, str],
               steps: dict[str, float]) -> None:
    """(a tag not written costs the figures, never the join)"""
    if a.no_report:
        return
    try:
        tag_self(md, facts["instance_id"], facts["region"], TAG_BOOT_TIMES, boot_times(steps))
    except (BootError, urllib.error.URLError, OSError, ValueError, KeyError) as e:
        say(f"boot times not tagged: {e}")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    md = Metadata()
    facts: dict[str, str] = {}
    try:
        boot(a, md, facts)
        return 0
    except BootError as e:
        err = e
    except (urllib.error.URLError, OSError, ValueError) as e:  # metadata answered oddly
        err = BootError("metadata", f"reading instance metadata: {e}")
    note = ""
    if not a.no_report and facts.get("instance_id"):
        try:
            report(md, facts["instance_id"], facts.get("region", ""), err)
            note = f" (reported as tag {TAG_BOOT_ERROR})"
        except (BootError, urllib.error.URLError, OSError, ValueError, KeyError) as e:
            note = f" (not reported: {e})"
    elif not facts.get("instance_id"):
        note = " (not reported: the instance id is unknown)"
    print(f"{PREFIX}not joining Slurm: {err.cause}: {err.what}{note}", file=sys.stderr,
          flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
