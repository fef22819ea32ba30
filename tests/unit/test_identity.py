"""The names a process gives its database sessions and AWS requests (identity.py)."""

from __future__ import annotations

import os
import socket

import pytest

from slurmscale import __version__, identity
from slurmscale.cloud.aws import make_client
from slurmscale.config import AwsSettings


def test_a_session_name_keeps_the_pid_whole_within_postgresqls_63_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "head-node." + "x" * 80)
    name = identity.application_name("store")
    assert len(name.encode()) <= 63
    assert name.startswith("slurmscale-store head-node.x")
    assert name.endswith(f"xxx:{os.getpid()}")  # (the host cut, not the PID)


def test_a_short_host_is_named_whole() -> None:
    assert identity.application_name("lease") == (
        f"slurmscale-lease {socket.gethostname()}:{os.getpid()}")


def test_every_aws_request_names_slurmscale_and_this_process() -> None:
    client = make_client("ec2", AwsSettings(region="us-east-1"), "http://127.0.0.1:9")
    agent = client.meta.config.user_agent_extra
    assert agent == f"slurmscale/{__version__} ({socket.gethostname()}:{os.getpid()})"


def test_only_a_postgresql_url_that_names_no_session_gets_this_process_name() -> None:
    pg = "postgresql+psycopg://slurmscale@db.example:5432/slurmscale"
    assert identity.session_args(pg, "store") == {
        "application_name": identity.application_name("store")}
    assert identity.session_args(pg + "?application_name=site-ha", "lease") == {}
    assert identity.session_args("sqlite:////var/lib/slurmscale/state.db", "store") == {}
