"""Least privilege at the daemon's edges: who may use its socket, which config it accepts."""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from slurmscale.api_client import call
from slurmscale.config import ConfigError
from slurmscale.config_file import load_config
from slurmscale.daemon.api import ApiServer, resolve_uids
from tests.unit.conftest import base_config


@pytest.fixture
def short_dir():  # type: ignore[no-untyped-def]
    """Unix socket paths are limited to 108 bytes: pytest's tmp_path can be longer."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ss-sec-") as d:
        yield d


def _serve(path: str, uids: frozenset[int]) -> ApiServer:
    api = ApiServer(path, {("GET", "/v1/health"): lambda _b: (200, {"ok": True})}, uids)
    api.start()
    return api


def test_the_socket_answers_allowed_uids_only_and_is_0660(short_dir) -> None:  # type: ignore[no-untyped-def]
    me = os.geteuid()
    ok = _serve(f"{short_dir}/ok.sock", frozenset({me}))
    no = _serve(f"{short_dir}/no.sock", frozenset({me + 4242}))
    try:
        assert stat.S_IMODE(os.stat(f"{short_dir}/ok.sock").st_mode) == 0o660
        assert call(f"{short_dir}/ok.sock", "GET", "/v1/health") == (200, {"ok": True})
        status, body = call(f"{short_dir}/no.sock", "GET", "/v1/health")
        assert status == 403 and f"uid {me}" in body["error"]
    finally:
        ok.stop()
        no.stop()


def test_api_users_resolve_to_uids_with_the_daemons_own() -> None:
    uids = resolve_uids(["root", "no-such-user-slurmscale", 4242])
    assert {0, 4242, os.geteuid()} <= uids
    assert len(uids) == len({0, 4242, os.geteuid()})


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_config_others_can_write_is_refused(tmp_path, mode: int) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "slurmscale.yaml"
    p.write_text(yaml.safe_dump(base_config()))
    os.chmod(p, mode)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert f"{mode:04o}" in str(e.value) and "chmod go-w" in str(e.value)
    os.chmod(p, 0o640)
    assert load_config(p).cluster_name == "unit"


def test_the_iam_policy_grants_every_aws_call_the_code_makes_and_scopes_the_dangerous_ones(
) -> None:
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    policy = json.loads((root / "docs" / "iam-policy.json").read_text())
    allowed: dict[str, list[dict]] = {}
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow"
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        for a in actions:
            allowed.setdefault(a, []).append(st)
    # every API the cloud adapters call, by boto3 operation name
    code = "".join(p.read_text() for p in (root / "slurmscale" / "cloud").glob("*.py"))
    ops = set(re.findall(r'_call\("([a-z_]+)"', code))
    ops |= set(re.findall(r'_paginator\("([a-z_]+)"\)', code))
    ops |= set(re.findall(r'"(describe_[a-z_]+_topology)"', code))  # (through _topology)
    assert ops >= {"create_fleet", "create_tags", "terminate_instances", "describe_instances",
                   "receive_message", "delete_message", "describe_instance_topology",
                   "describe_capacity_reservation_topology"}
    for op in ops:
        service = ("sqs" if op in {"receive_message", "delete_message"} else "route53"
                   if op.endswith("resource_record_sets") else "ec2")
        action = f"{service}:" + "".join(w.capitalize() for w in op.split("_"))
        assert action in allowed, f"{action} (called as {op}) is not in docs/iam-policy.json"
    # terminating is only ever allowed on instances carrying this cluster's tag
    # (and stopping and starting: a warm pool's)
    for st in (allowed["ec2:TerminateInstances"] + allowed["ec2:DeletePlacementGroup"]
               + allowed["ec2:StopInstances"] + allowed["ec2:StartInstances"]):
        assert st["Condition"]["StringEquals"]["ec2:ResourceTag/slurmscale:cluster"]
    for st in allowed["ec2:CreatePlacementGroup"]:
        assert st["Condition"]["StringEquals"]["aws:RequestTag/slurmscale:cluster"]
    assert all("Condition" in st for st in allowed["ec2:CreateTags"])
    # node names are written in the cluster's own zone, never in every zone of the account
    for st in allowed["route53:ChangeResourceRecordSets"]:
        assert st["Resource"].startswith("arn:aws:route53:::hostedzone/")
    # what `check` reads of the events path, the munge key and the image (check_aws.py),
    # by the client each call is made on
    code = (root / "slurmscale" / "check_aws.py").read_text()
    checks = set(re.findall(r'call\((sqs|ev|ssm|ec2), "([a-z_]+)"', code))
    assert {op for _, op in checks} >= {"get_queue_attributes", "list_rule_names_by_target",
                                        "describe_rule", "describe_parameters",
                                        "describe_fast_snapshot_restores"}
    for client, op in checks:
        service = {"ev": "events"}.get(client, client)
        action = f"{service}:" + "".join(w.capitalize() for w in op.split("_"))
        assert action in allowed, f"{action} (check's {op}) is not in docs/iam-policy.json"


def test_garbage_on_the_socket_gets_an_error_and_the_server_keeps_answering(short_dir) -> None:  # type: ignore[no-untyped-def]
    import socket as _socket

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    path = f"{short_dir}/fuzz.sock"
    api = ApiServer(path, {("GET", "/v1/health"): lambda _b: (200, {"ok": True}),
                           ("POST", "/v1/poke"): lambda _b: (202, {"queued": True})},
                    frozenset({os.geteuid()}))
    api.start()

    def send(raw: bytes) -> bytes:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(path)
            s.sendall(raw)
            s.shutdown(_socket.SHUT_WR)
            return s.recv(65536)
        finally:
            s.close()

    heads = st.sampled_from([b"GET /v1/health HTTP/1.0\r\n", b"POST /v1/poke HTTP/1.0\r\n",
                             b"BREW /coffee HTTP/1.0\r\n", b""])
    lengths = st.sampled_from([b"", b"Content-Length: -1\r\n", b"Content-Length: x\r\n",
                               b"Content-Length: 99999999999\r\n", b"Content-Length: 3\r\n"])

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(head=heads, length=lengths, body=st.binary(max_size=64) | st.text(max_size=20).map(
        lambda t: t.encode("utf-8", "surrogatepass")))
    def one(head: bytes, length: bytes, body: bytes) -> None:
        reply = send(head + length + b"\r\n" + body)
        if reply.startswith(b"HTTP/"):
            status = int(reply.split(b" ", 2)[1])
            assert status in (200, 202, 400, 404, 501), reply[:200]
        else:  # no request line: the stdlib answers the HTTP/0.9 way, a bare error page
            assert not reply or b"Error" in reply, reply[:200]

    try:
        one()
        assert call(path, "GET", "/v1/health") == (200, {"ok": True})
    finally:
        api.stop()


PG = "postgresql+psycopg://slurmscale@db.internal:5432/slurmscale"


def _write(tmp_path, data: dict, mode: int):  # type: ignore[no-untyped-def]
    p = tmp_path / "slurmscale.yaml"
    p.write_text(yaml.safe_dump(data))
    os.chmod(p, mode)
    return p


def test_the_store_password_comes_from_a_private_file_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pw = tmp_path / "db-password"
    pw.write_text("s3cr3t\n")
    os.chmod(pw, 0o600)
    cfg = load_config(_write(tmp_path, base_config(store_url=PG, store_password_file=str(pw)),
                             0o644))
    assert cfg.database_url() == ("postgresql+psycopg://slurmscale:s3cr3t@db.internal:5432/"
                                  "slurmscale")
    os.chmod(pw, 0o640)
    with pytest.raises(ConfigError, match="readable or writable by others.*chmod 600"):
        cfg.database_url()
    pw.unlink()
    with pytest.raises(ConfigError, match="cannot read store_password_file"):
        cfg.database_url()


def test_a_password_in_a_world_readable_config_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    inline = PG.replace("slurmscale@", "slurmscale:s3cr3t@")
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, base_config(store_url=inline), 0o644))
    assert "store_password_file" in str(e.value) and "s3cr3t" not in str(e.value)
    assert load_config(_write(tmp_path, base_config(store_url=inline), 0o600))


def test_the_cli_reports_an_unreadable_password_file_without_a_traceback(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from slurmscale.cli import cli

    conf = _write(tmp_path, base_config(store_url=PG, store_password_file=str(tmp_path / "x")),
                  0o644)
    r = CliRunner().invoke(cli, ["--config", str(conf), "events"])
    assert r.exit_code == 2 and "cannot read store_password_file" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://slurm@127.0.0.1:9/slurmscale?password=s3cr%21t-Q",
    "postgresql+psycopg://slurm@127.0.0.1:9/slurmscale?sslmode=require&PASSWORD=s3cr!t-Q",
    "postgresql+psycopg://slurm:s3cr!t-Q@127.0.0.1:9/slurmscale"])
def test_a_password_in_any_url_form_is_refused_world_readable_and_never_printed(
        tmp_path, url: str) -> None:
    """Before the fix a password in the query string passed the world-readable check and was
    printed by the daemon's start-up line and by `status`."""
    import subprocess
    import sys

    import yaml

    from slurmscale.config import ConfigError
    from slurmscale.config_file import load_config, redact
    from tests.unit.conftest import base_config

    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(base_config(store_url=url, spool_dir=str(tmp_path))))
    conf.chmod(0o644)
    with pytest.raises(ConfigError, match="carries a password"):
        load_config(conf)
    assert "s3cr" not in redact(f"cannot open {url}: refused", url)
    conf.chmod(0o640)
    # an unreachable store: the error names the store, never the secret
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), "events"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "s3cr" not in p.stdout + p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_second_server_never_takes_or_removes_a_live_servers_socket(short_dir) -> None:  # type: ignore[no-untyped-def]
    """Before the fix a second daemon on the same config bound the leader's socket path and,
    on stop, removed it: the leader kept leading with no socket."""
    from slurmscale.daemon.api import SocketInUse

    path = f"{short_dir}/d.sock"
    me = frozenset({os.geteuid()})
    first = _serve(path, me)
    try:
        with pytest.raises(SocketInUse):
            ApiServer(path, {}, me)
        assert call(path, "GET", "/v1/health") == (200, {"ok": True})
    finally:
        first.stop()
    assert not os.path.exists(path), "the server removes its own socket"
    # a socket left by a dead server is taken over
    import socket as _socket

    dead = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    dead.bind(path)
    dead.close()
    again = _serve(path, me)
    # and one stopped after another server replaced its socket file leaves that one alone
    os.unlink(path)
    other = _serve(path, me)
    again.stop()
    try:
        assert call(path, "GET", "/v1/health") == (200, {"ok": True})
    finally:
        other.stop()


def test_the_socket_takes_a_burst_of_simultaneous_pokes(short_dir) -> None:  # type: ignore[no-untyped-def]
    """Before: a listen backlog of 5 refused 17 of 30 simultaneous connections."""
    import socket as _socket

    from slurmscale.daemon.api import BACKLOG

    assert BACKLOG >= 30
    path = f"{short_dir}/b.sock"
    api = _serve(path, frozenset({os.geteuid()}))
    held = []
    try:
        # connect 30 at once without any being accepted yet: all must be queued
        api.server.shutdown()  # stop accepting; the listening socket stays open
        for _ in range(30):
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(path)
            held.append(s)
    finally:
        for s in held:
            s.close()
        api.server.server_close()
        os.unlink(path)
    assert len(held) == 30


def test_a_new_sqlite_store_and_its_directory_are_private(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Before: created 0644 (the umask), so any local user could read the whole store."""
    from slurmscale.store.repo import Store

    old = os.umask(0o022)
    try:
        s = Store(f"sqlite:///{tmp_path / 'new' / 'state.db'}")
        s.upgrade()
        s.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "state.db").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


@pytest.mark.parametrize("body", [b"\xff\xfe\x00", b"[" * 100_000, b"{\"a\": \xc3}"])
def test_a_post_body_that_is_not_utf8_json_gets_400_and_the_server_answers_on(
        short_dir, body: bytes) -> None:
    """Before: a non-UTF-8 POST body raised inside the handler: a traceback on the daemon's
    stderr and no reply."""
    import socket as _socket

    path = f"{short_dir}/p.sock"
    api = ApiServer(path, {("POST", "/v1/poke"): lambda _b: (202, {"queued": True}),
                           ("GET", "/v1/health"): lambda _b: (200, {"ok": True})},
                    frozenset({os.geteuid()}))
    api.start()
    try:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(path)
        s.sendall(b"POST /v1/poke HTTP/1.0\r\nContent-Length: " + str(len(body)).encode()
                  + b"\r\n\r\n" + body)
        reply = s.recv(65536)
        s.close()
        assert reply.startswith(b"HTTP/1.0 400"), reply[:200]
        assert call(path, "GET", "/v1/health") == (200, {"ok": True})
    finally:
        api.stop()


def test_the_node_role_may_only_tag_its_own_instance_with_a_boot_error() -> None:
    """The instance role's policy (docs/node-iam-policy.json) grants the two calls the node
    bootstrap makes: CreateTags, scoped to the calling instance, this cluster and the boot
    error's key; and GetParameter of the munge key's parameter alone."""
    import json
    import re
    from pathlib import Path

    from slurmscale import node_init

    root = Path(__file__).resolve().parents[2]
    policy = json.loads((root / "docs" / "node-iam-policy.json").read_text())
    st, key = policy["Statement"]
    assert key["Effect"] == "Allow" and key["Action"] == "ssm:GetParameter"
    assert key["Resource"] == "arn:aws:ssm:REGION:ACCOUNT_ID:parameter/MUNGE_KEY_PARAMETER"
    assert st["Effect"] == "Allow" and st["Action"] == "ec2:CreateTags"
    cond = st["Condition"]
    assert cond["StringEquals"]["aws:ARN"] == "${ec2:SourceInstanceARN}"
    assert cond["ForAllValues:StringEquals"]["aws:TagKeys"] == [node_init.TAG_BOOT_ERROR,
                                                                 node_init.TAG_BOOT_TIMES]
    assert "aws:ResourceTag/slurmscale:cluster" in cond["StringEquals"]
    text = Path(node_init.__file__).read_text()
    actions = set(re.findall(r'"Action": "(\w+)"', text))
    assert actions == {"CreateTags"}
    assert set(re.findall(r'"AmazonSSM\.(\w+)"', text)) == {"GetParameter"}
