"""The node bootstrap (slurmscale/node_init.py) against the loopback metadata emulator
(slurmscale/localcluster/imds.py) over real HTTP, with a fake EC2 behind the emulator and a
small HTTP server standing in for EC2's API where the bootstrap reports a failure."""

from __future__ import annotations

import ast
import base64
import gzip
import http.server
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slurmscale import node_init
from slurmscale.cli_node import USER_DATA_LIMIT, render_user_data
from slurmscale.config import Config
from slurmscale.localcluster.imds import InstanceMetadata
from slurmscale.node_init import (
    TAG_BOOT_ERROR,
    BootError,
    Metadata,
    check_gpus,
    sigv4_headers,
    wait_for_node,
)

IID = "i-0123456789abcdef0"
CLUSTER = "unit"


class FakeEc2:
    """What the emulator reads: one instance, its tags (mutable), its template."""

    def __init__(self, tags_enabled: bool = True) -> None:
        self.tags: dict[str, str] = {"slurmscale:cluster": CLUSTER, "slurmscale:pool": "gpu"}
        self.tags_enabled = tags_enabled
        self.state = "running"

    def describe_instances(self, InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803
        if InstanceIds != [IID]:
            raise ValueError("InvalidInstanceID.NotFound")
        return {"Reservations": [{"Instances": [{
            "InstanceId": IID, "InstanceType": "p5.48xlarge", "State": {"Name": self.state},
            "Placement": {"AvailabilityZone": "us-east-1a"}, "PrivateIpAddress": "10.0.0.9",
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()]}]}]}

    def describe_launch_template_versions(self, **kw: Any) -> dict[str, Any]:
        opts = {"InstanceMetadataTags": "enabled" if self.tags_enabled else "disabled"}
        return {"LaunchTemplateVersions": [{"LaunchTemplateData": {"MetadataOptions": opts}}]}


@pytest.fixture
def ec2() -> FakeEc2:
    return FakeEc2()


@pytest.fixture
def imds(ec2: FakeEc2):  # type: ignore[no-untyped-def]
    md = InstanceMetadata(ec2, lambda inst: ("gpu", "1")).start()
    yield md
    md.stop()


class Ec2Api(http.server.BaseHTTPRequestHandler):
    """EC2's query API as far as CreateTags goes: records what it was sent."""

    received: list[tuple[dict[str, str], dict[str, list[str]]]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Ec2Api.received.append((dict(self.headers), urllib.parse.parse_qs(body.decode())))
        out = b"<CreateTagsResponse><return>true</return></CreateTagsResponse>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a: Any) -> None:
        pass


@pytest.fixture
def ec2_api(monkeypatch):  # type: ignore[no-untyped-def]
    Ec2Api.received = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ec2Api)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", f"http://127.0.0.1:{srv.server_address[1]}/")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)  # the instance role's, from metadata
    yield Ec2Api
    srv.shutdown()
    srv.server_close()


# --- IMDSv2 --------------------------------------------------------------------------------
def test_a_token_is_fetched_once_and_carried_by_every_get(imds: InstanceMetadata) -> None:
    md = Metadata(imds.endpoint(IID))
    assert md.need("instance-id") == IID
    assert md.need("placement/availability-zone") == "us-east-1a"
    assert md.get("placement/region") == "us-east-1"
    assert len(imds.tokens) == 1


def test_an_expired_token_is_renewed_on_401(imds: InstanceMetadata) -> None:
    md = Metadata(imds.endpoint(IID))
    assert md.need("instance-type") == "p5.48xlarge"
    old = md.token
    imds.tokens[old] = (IID, time.monotonic() - 1)  # expired at the service
    assert md.need("instance-type") == "p5.48xlarge"
    assert md.token != old


def test_the_emulator_refuses_what_imdsv2_refuses(imds: InstanceMetadata) -> None:
    import urllib.error
    import urllib.request

    base = imds.endpoint(IID)
    with pytest.raises(urllib.error.HTTPError) as e:  # no token
        urllib.request.urlopen(base + "latest/meta-data/instance-id", timeout=5)
    assert e.value.code == 401
    for ttl in ("", "0", "21601"):
        req = urllib.request.Request(base + "latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": ttl})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == 400
    other = Metadata(imds.endpoint(IID))
    token = other._token()
    # a token is good for its own instance only
    req = urllib.request.Request(imds.endpoint("i-0000000000000000f")
                                 + "latest/meta-data/instance-id",
                                 headers={"X-aws-ec2-metadata-token": token})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 401


def test_a_missing_path_is_none(imds: InstanceMetadata) -> None:
    md = Metadata(imds.endpoint(IID))
    assert md.get("no/such/path") is None
    assert md.get("tags/instance/slurmscale:node") is None
    with pytest.raises(BootError) as e:
        md.need("no/such/path")
    assert e.value.cause == "metadata"


def test_the_endpoint_comes_from_the_environment_as_botocore_reads_it(
        imds: InstanceMetadata, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint(IID).rstrip("/"))
    md = Metadata()
    assert md.base == imds.endpoint(IID)
    assert md.need("instance-id") == IID
    monkeypatch.delenv("AWS_EC2_METADATA_SERVICE_ENDPOINT")
    assert Metadata().base == "http://169.254.169.254/"  # never contacted here


def test_a_metadata_service_that_does_not_answer_fails_by_its_deadline() -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    md = Metadata(f"http://127.0.0.1:{port}/", timeout=0.2)
    t0 = time.monotonic()
    with pytest.raises(BootError) as e:
        node_init.until_ready(md, time.monotonic() + 1.0)
    assert e.value.cause == "metadata" and "did not answer" in e.value.what
    assert time.monotonic() - t0 < 5


# --- the node tag --------------------------------------------------------------------------
def test_the_node_tag_is_waited_for(imds: InstanceMetadata, ec2: FakeEc2) -> None:
    threading.Timer(0.6, lambda: ec2.tags.update({"slurmscale:node": "spot-3"})).start()
    t0 = time.monotonic()
    assert wait_for_node(Metadata(imds.endpoint(IID)), CLUSTER, 10, poll=0.1) == "spot-3"
    assert 0.5 < time.monotonic() - t0 < 5


def test_no_node_tag_by_the_deadline_is_a_tag_timeout(imds: InstanceMetadata) -> None:
    with pytest.raises(BootError) as e:
        wait_for_node(Metadata(imds.endpoint(IID)), CLUSTER, 0.5, poll=0.1)
    assert e.value.cause == "tag-timeout"


def test_another_clusters_instance_is_refused(imds: InstanceMetadata, ec2: FakeEc2) -> None:
    ec2.tags["slurmscale:node"] = "spot-1"
    with pytest.raises(BootError) as e:
        wait_for_node(Metadata(imds.endpoint(IID)), "other", 5)
    assert e.value.cause == "wrong-cluster" and "'unit'" in e.value.what


def test_tags_not_in_metadata_fail_within_their_grace_and_say_what_to_enable(
        ec2: FakeEc2, monkeypatch: pytest.MonkeyPatch) -> None:
    """404 on tags/instance is what metadata says both with tags disabled and while the
    instance has no tag yet (issue 45): waited for a short grace, not the tag timeout."""
    monkeypatch.setattr(node_init, "TAGS_GRACE_S", 1.0)
    ec2.tags_enabled = False
    ec2.tags["slurmscale:node"] = "spot-1"
    md = InstanceMetadata(ec2, lambda inst: ("gpu", "1")).start()
    try:
        t0 = time.monotonic()
        with pytest.raises(BootError) as e:
            wait_for_node(Metadata(md.endpoint(IID)), CLUSTER, 30, poll=0.1)
        assert 1.0 <= time.monotonic() - t0 < 5
        assert "InstanceMetadataTags=enabled" in e.value.what
    finally:
        md.stop()


def test_tags_that_appear_within_the_grace_are_read(ec2: FakeEc2) -> None:
    ec2.tags.clear()  # none yet: metadata answers 404 on tags/instance
    md = InstanceMetadata(ec2, lambda inst: ("gpu", "1")).start()
    try:
        threading.Timer(0.5, lambda: ec2.tags.update({"slurmscale:cluster": CLUSTER,
                                                      "slurmscale:node": "spot-2"})).start()
        assert wait_for_node(Metadata(md.endpoint(IID)), CLUSTER, 10, poll=0.1) == "spot-2"
    finally:
        md.stop()


def test_an_instance_without_a_cluster_tag_or_with_a_bad_node_name_is_refused(
        imds: InstanceMetadata, ec2: FakeEc2) -> None:
    del ec2.tags["slurmscale:cluster"]
    ec2.tags["slurmscale:node"] = "spot-1"
    with pytest.raises(BootError) as e:
        wait_for_node(Metadata(imds.endpoint(IID)), CLUSTER, 0.5, poll=0.1)
    assert e.value.cause == "wrong-cluster" and "no slurmscale:cluster tag" in e.value.what
    ec2.tags["slurmscale:cluster"] = CLUSTER
    for bad in ("spot-1 -b", "../etc", "-N"):
        ec2.tags["slurmscale:node"] = bad
        with pytest.raises(BootError) as e:
            wait_for_node(Metadata(imds.endpoint(IID)), CLUSTER, 5, poll=0.1)
        assert e.value.cause == "metadata" and "not a Slurm node name" in e.value.what


@pytest.mark.parametrize("code", [403, 404])
def test_a_metadata_service_that_refuses_fails_at_once(code: int) -> None:
    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802
            self.send_error(code)

        def log_message(self, *a: Any) -> None:
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        md = Metadata(f"http://127.0.0.1:{srv.server_address[1]}/", timeout=1)
        t0 = time.monotonic()
        with pytest.raises(BootError) as e:
            node_init.until_ready(md, time.monotonic() + 60)
        assert time.monotonic() - t0 < 5, "not the 60 s of retries"
        assert e.value.cause == "metadata" and f"HTTP {code}" in e.value.what
    finally:
        srv.shutdown()
        srv.server_close()


# --- pre-flight ----------------------------------------------------------------------------
def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_gpu_check_counts_nvidia_smi_lines(tmp_path: Path) -> None:
    smi = _script(tmp_path / "nvidia-smi", 'for i in 0 1 2 3; do echo "GPU $i: H100 (UUID: x)"; '
                  "done\n")
    check_gpus(smi, 4)
    with pytest.raises(BootError) as e:
        check_gpus(smi, 8)
    assert e.value.cause == "gpu-check" and "4 GPU(s)" in e.value.what
    broken = _script(tmp_path / "broken", "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    with pytest.raises(BootError) as e:
        check_gpus(broken, 8)
    assert "exited 9: NVIDIA-SMI has failed" in e.value.what
    with pytest.raises(BootError) as e:
        check_gpus(str(tmp_path / "absent"), 8)
    assert e.value.cause == "gpu-check"


# --- whole runs ------------------------------------------------------------------------------
def _run(imds: InstanceMetadata, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    import os

    e = {**os.environ, "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.endpoint(IID), **(env or {})}
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        e.pop(k, None)
    return subprocess.run([sys.executable, node_init.__file__, *args], env=e,
                          capture_output=True, text=True, timeout=60)


def test_a_good_boot_starts_slurmd_as_its_node(imds: InstanceMetadata, ec2: FakeEc2,
                                               tmp_path: Path) -> None:
    ec2.tags["slurmscale:node"] = "spot-7"
    seen = tmp_path / "argv"
    slurmd = _script(tmp_path / "slurmd", f'echo "$@ node=$SLURMSCALE_NODE" > {seen}\n')
    smi = _script(tmp_path / "nvidia-smi", 'echo "GPU 0: x"; echo "GPU 1: x"\n')
    p = _run(imds, "--cluster", CLUSTER, "--slurmd", slurmd, "--gpus", "2", "--nvidia-smi",
             smi, "--conf-server", "ctl1:6817", "--conf-server", "ctl2", "--", "-vv")
    assert p.returncode == 0, p.stderr
    assert seen.read_text().split() == ["-N", "spot-7", "-b", "--conf-server", "ctl1:6817,ctl2",
                                        "-vv", "node=spot-7"]
    assert "is node spot-7" in p.stdout and p.stderr == ""
    # a slurmd that knows them (23.02+) reports the instance when it registers
    slurmd = _script(tmp_path / "slurmd", 'if [ "$1" = --help ]; then echo "  --instance-id '
                     f'id  Cloud instance ID of node."; exit 0; fi; echo "$@" > {seen}\n')
    p = _run(imds, "--slurmd", slurmd)
    assert p.returncode == 0, p.stderr
    assert seen.read_text().split() == ["-N", "spot-7", "-b", "--instance-id", IID,
                                        "--instance-type", "p5.48xlarge"]


def test_a_failed_check_tags_the_instance_and_exits_with_one_line(
        imds: InstanceMetadata, ec2: FakeEc2, ec2_api: type[Ec2Api], tmp_path: Path) -> None:
    ec2.tags["slurmscale:node"] = "spot-2"
    smi = _script(tmp_path / "nvidia-smi", 'echo "GPU 0: x"\n')
    slurmd = _script(tmp_path / "slurmd", f"touch {tmp_path / 'ran'}\n")
    p = _run(imds, "--cluster", CLUSTER, "--gpus", "8", "--nvidia-smi", smi, "--slurmd", slurmd,
             env={"AWS_ENDPOINT_URL_EC2": __import__("os").environ["AWS_ENDPOINT_URL_EC2"]})
    assert p.returncode == 1
    assert not (tmp_path / "ran").exists(), "a node that failed its checks never joins"
    (line,) = p.stderr.splitlines()
    assert line.startswith("slurmscale-node-init: not joining Slurm: gpu-check: 1 GPU(s)")
    assert "Traceback" not in p.stderr and "reported as tag" in line
    (headers, form), = ec2_api.received
    assert form["Action"] == ["CreateTags"] and form["ResourceId.1"] == [IID]
    assert form["Tag.1.Key"] == [TAG_BOOT_ERROR]
    assert form["Tag.1.Value"][0].startswith("gpu-check: 1 GPU(s) seen")
    auth = {k.lower(): v for k, v in headers.items()}["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=testing/")  # the role's, from IMDS
    assert "/us-east-1/ec2/aws4_request" in auth


def test_a_failing_site_check_is_reported_with_its_last_line(
        imds: InstanceMetadata, ec2: FakeEc2, ec2_api: type[Ec2Api], tmp_path: Path) -> None:
    ec2.tags["slurmscale:node"] = "spot-2"
    check = _script(tmp_path / "nhc", 'echo "checking $SLURMSCALE_NODE"; echo "ERROR: Xid 79" '
                    ">&2; exit 3\n")
    p = _run(imds, "--check-program", check, "--slurmd", "/bin/true")
    assert p.returncode == 1
    assert "health-check: " in p.stderr and "exited 3: ERROR: Xid 79" in p.stderr
    assert ec2_api.received[0][1]["Tag.1.Value"][0].startswith("health-check: ")


def test_a_slurmd_that_will_not_start_is_reported(imds: InstanceMetadata, ec2: FakeEc2,
                                                  ec2_api: type[Ec2Api], tmp_path: Path) -> None:
    ec2.tags["slurmscale:node"] = "spot-2"
    bad = _script(tmp_path / "slurmd", "echo 'fatal: Unable to determine this slurmd' >&2; "
                  "exit 1\n")
    p = _run(imds, "--slurmd", bad)
    assert p.returncode == 1 and "slurmd: slurmd exited 1: fatal" in p.stderr
    p = _run(imds, "--slurmd", str(tmp_path / "absent"), "--foreground")
    assert p.returncode == 1 and "slurmd: cannot run" in p.stderr


def test_when_the_report_cannot_be_sent_the_line_says_so(imds: InstanceMetadata,
                                                         tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/"
    p = _run(imds, "--tag-timeout", "0.3", env={"AWS_ENDPOINT_URL_EC2": dead})
    assert p.returncode == 1
    (line,) = p.stderr.splitlines()
    assert "tag-timeout" in line and "(not reported: " in line


def test_bad_arguments_exit_2(imds: InstanceMetadata) -> None:
    p = _run(imds, "--gpus", "-1")
    assert p.returncode == 2 and "--gpus must be 0 or more, got -1" in p.stderr
    p = _run(imds, "--slurm-conf", "/etc/slurm.conf", "--conf-server", "x")
    assert p.returncode == 2 and "not both" in p.stderr


# --- the request signature and the file itself -----------------------------------------------
def test_the_signature_is_botocores(ec2_api: type[Ec2Api]) -> None:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime(2026, 12, 1, 12, 30, 5, tzinfo=UTC)
    url = "https://ec2.eu-west-1.amazonaws.com/"
    body = urllib.parse.urlencode({"Action": "CreateTags", "Version": "2016-11-15",
                                   "ResourceId.1": IID, "Tag.1.Key": TAG_BOOT_ERROR,
                                   "Tag.1.Value": "gpu-check: 7 of 8 / ünïcode"}).encode()
    ours = sigv4_headers(url, body, "eu-west-1", ("AKID", "SECRET", "TOKEN"), now)
    req = AWSRequest("POST", url, data=body, headers={
        "Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    req.context["timestamp"] = now.strftime("%Y%m%dT%H%M%SZ")
    auth = SigV4Auth(Credentials("AKID", "SECRET", "TOKEN"), "ec2", "eu-west-1")
    req.headers["X-Amz-Date"] = req.context["timestamp"]
    req.headers["X-Amz-Security-Token"] = "TOKEN"
    canonical = auth.canonical_request(req)
    theirs = auth.signature(auth.string_to_sign(req, canonical), req)
    assert ours["authorization"].endswith(f"Signature={theirs}")


def test_the_bootstrap_is_one_small_stdlib_file_for_python_3_8() -> None:
    src = Path(node_init.__file__).read_text()
    # EC2's 16 KB limit is on the user data, which carries this file gzipped and in base64
    # (test_user_data_carries_the_bootstrap_and_fits: 10.4 KB of user data at 22 KB, the
    # munge key's read from SSM included); this keeps the file small enough to read on a
    # console
    assert len(src.encode()) < 24576
    tree = ast.parse(src, feature_version=(3, 8))  # refuses syntax newer than 3.8's
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)
    for n in ast.walk(tree):  # no builtin generics or X | Y outside annotations (3.9/3.10)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            assert n.func.attr not in {"removeprefix", "removesuffix"}


def test_user_data_carries_the_bootstrap_and_fits(cfg: Config) -> None:
    text = render_user_data(cfg, cfg.pool("gpu-spot"), ("ctl:6817",))
    assert len(text.encode()) <= USER_DATA_LIMIT
    packed = text.split("<<'EOF' | gzip -dc > /usr/local/lib/slurmscale/node-init.py\n")[1]
    packed = packed.split("EOF\n")[0]
    assert gzip.decompress(base64.b64decode(packed)) == Path(node_init.__file__).read_bytes()
    last = text.splitlines()[-1]
    assert last == ("exec python3 /usr/local/lib/slurmscale/node-init.py --cluster unit "
                    "--gpus 8 --tag-timeout 600 --conf-server ctl:6817")


def test_user_data_installs_a_unit_that_rejoins_after_a_reboot(cfg: Config,
                                                               tmp_path: Path) -> None:
    """cloud-init runs user data at the first boot only (issue 45): a rebooted node runs the
    bootstrap again from a systemd unit the first boot enabled. The script parses as sh; the
    unit passes systemd-analyze where systemd's tools are installed."""
    import shutil

    from slurmscale.cli_node import REBOOT_UNIT

    text = render_user_data(cfg, cfg.pool("gpu-spot"), ("ctl:6817",))
    assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0
    unit = text.split(f"cat > {REBOOT_UNIT} <<'UNIT'\n")[1].split("UNIT\n")[0]
    assert ("ExecStart=/usr/bin/python3 /usr/local/lib/slurmscale/node-init.py --cluster unit "
            "--gpus 8 --tag-timeout 600 --conf-server ctl:6817\n") in unit
    assert "systemctl enable slurmscale-node-init.service\n" in text
    if shutil.which("systemd-analyze"):
        path = tmp_path / "slurmscale-node-init.service"
        path.write_text(unit)
        p = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and "slurmscale-node-init" not in p.stderr, p.stderr


def test_metadata_answers_that_fail_for_a_moment_are_tried_again() -> None:
    """A throttled or slow metadata service (503, 429, a timeout) is asked again after a
    pause, as the AWS SDKs' IMDS clients do; a refusal is not. Before, one slow answer
    failed the boot (`metadata: reading instance metadata: timed out`) and cost the node a
    fresh instance."""
    import http.server
    import threading

    answers = [503, 429, 200]
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802
            self._send(200, b"token")

        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.path)
            code = answers.pop(0) if answers else 403
            self._send(code, b"i-0123456789abcdef0" if code == 200 else b"")

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        md = node_init.Metadata(f"http://127.0.0.1:{server.server_address[1]}/")
        md.RETRY_PAUSES_S = (0.01, 0.01, 0.01)  # type: ignore[misc]
        assert md.get("instance-id") == "i-0123456789abcdef0"
        assert len(seen) == 3
        with pytest.raises(urllib.error.HTTPError) as e:  # a refusal: asked once
            md.get("instance-type")
        assert e.value.code == 403 and len(seen) == 4
    finally:
        server.shutdown()
        server.server_close()
