"""A loopback stand-in for EC2's instance metadata service, for the local and container
clusters: each "instance" reads its own metadata at `http://127.0.0.1:PORT/<instance-id>/`
(what 169.254.169.254 is to a real instance), answered from the moto EC2 server.

What it keeps of EC2's service (the EC2 user guide, "Use the Instance Metadata Service to
access instance metadata" and "View tags for your EC2 instances using instance metadata"):
- IMDSv2 tokens: `PUT latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` 1..21600
  (else 400); a GET without a valid, unexpired token for that instance is 401 (every instance
  here is `HttpTokens: required`); a token is good for its own instance only.
- `meta-data/instance-id`, `instance-type`, `placement/availability-zone`, `placement/region`,
  `local-ipv4`, `local-hostname`, `iam/security-credentials/<role>` (moto's dummy keys).
- `meta-data/tags/instance` (keys, one a line) and `tags/instance/<key>`, read from EC2 at the
  time of the GET, so a tag the daemon writes after launch appears while the instance runs;
  404 for a missing key, and for every tag path unless the launch template version that
  launched the instance says `InstanceMetadataTags: enabled` (as EC2 applies it at launch).
What it does not: the hop limit, IMDSv1, user data, network interfaces, throttling; it
answers for any instance of the moto server, so isolation comes from the path, not from
where the request comes from.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

ROLE = "slurmscale-node"
MAX_TTL_S = 21600


class InstanceMetadata:
    """The HTTP server and what it knows: tokens, and an EC2 client to read instances."""

    def __init__(self, ec2_client: Any,
                 template_of: Callable[[dict[str, Any]], tuple[str, str] | None]) -> None:
        self.ec2 = ec2_client
        self.template_of = template_of  # instance -> (launch template name, version)
        self.tokens: dict[str, tuple[str, float]] = {}  # token -> (instance id, expiry)
        self._tags_enabled: dict[tuple[str, str], bool] = {}  # (template, version) -> on
        self._lock = threading.Lock()
        handler = _handler(self)
        self.server = _Quiet(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="imds",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def endpoint(self, instance_id: str) -> str:
        """What AWS_EC2_METADATA_SERVICE_ENDPOINT is on that instance."""
        return f"http://127.0.0.1:{self.port}/{instance_id}/"

    def start(self) -> InstanceMetadata:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    # --- tokens ------------------------------------------------------------------------
    def issue(self, instance_id: str, ttl: int) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self.tokens = {t: v for t, v in self.tokens.items() if v[1] > now}
            self.tokens[token] = (instance_id, now + ttl)
        return token

    def valid(self, instance_id: str, token: str | None) -> bool:
        if not token:
            return False
        with self._lock:
            held = self.tokens.get(token)
        return held is not None and held[0] == instance_id and held[1] > time.monotonic()

    # --- metadata ------------------------------------------------------------------------
    def instance(self, instance_id: str) -> dict[str, Any] | None:
        try:
            res = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except Exception:  # noqa: BLE001 - an unknown id is a 404, as on a stranger's path
            return None
        found = [i for r in res for i in r["Instances"]]
        if not found or found[0]["State"]["Name"] not in ("pending", "running"):
            return None
        return dict(found[0])

    def tags_enabled(self, inst: dict[str, Any]) -> bool:
        """Whether the template version that launched `inst` put its tags in metadata. (moto
        reports every instance's MetadataOptions as the defaults, whatever the template said,
        and records no template on the instance: `template_of` names it.)"""
        which = self.template_of(inst)
        if which is None:
            return False
        if which not in self._tags_enabled:
            name, version = which
            ref = ({"LaunchTemplateId": name} if name.startswith("lt-")
                   else {"LaunchTemplateName": name})  # (a stack's pools name theirs by id)
            data = self.ec2.describe_launch_template_versions(
                **ref, Versions=[version])["LaunchTemplateVersions"][0]["LaunchTemplateData"]
            self._tags_enabled[which] = (
                data.get("MetadataOptions", {}).get("InstanceMetadataTags") == "enabled")
        return self._tags_enabled[which]

    def value(self, instance_id: str, path: str) -> str | None:
        inst = self.instance(instance_id)
        if inst is None:
            return None
        zone = inst.get("Placement", {}).get("AvailabilityZone", "")
        fixed = {
            "instance-id": inst["InstanceId"], "instance-type": inst.get("InstanceType", ""),
            "placement/availability-zone": zone, "placement/region": zone[:-1],
            "local-ipv4": inst.get("PrivateIpAddress", ""),
            "local-hostname": inst.get("PrivateDnsName", ""),
            "iam/security-credentials/": ROLE,
            f"iam/security-credentials/{ROLE}": json.dumps({
                "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "testing",
                "SecretAccessKey": "testing", "Token": "testing",
                "Expiration": "2099-01-01T00:00:00Z"}),
        }
        if path in fixed:
            return fixed[path]
        if path.rstrip("/") == "tags/instance" or path.startswith("tags/instance/"):
            if not self.tags_enabled(inst):
                return None
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])
                    if not t["Key"].startswith("aws:")}
            if path.rstrip("/") == "tags/instance":
                return "\n".join(sorted(tags))
            return tags.get(path[len("tags/instance/"):])
        return None


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client gone mid-answer (its instance terminated, its boot killed) is no error
        log.debug("imds: request from %s ended early", client_address, exc_info=True)


def _handler(md: InstanceMetadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("imds: " + fmt, *args)

        def _answer(self, code: int, body: str = "") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _split(self) -> tuple[str, str]:
            iid, _, rest = self.path.lstrip("/").partition("/")
            return iid, rest

        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            iid, rest = self._split()
            if rest != "latest/api/token":
                return self._answer(404)
            try:
                ttl = int(self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
            except ValueError:
                ttl = 0
            if not 1 <= ttl <= MAX_TTL_S:
                return self._answer(400)
            if md.instance(iid) is None:
                return self._answer(404)
            self._answer(200, md.issue(iid, ttl))

        def do_GET(self) -> None:  # noqa: N802
            iid, rest = self._split()
            if not md.valid(iid, self.headers.get("X-aws-ec2-metadata-token")):
                return self._answer(401)
            if not rest.startswith("latest/meta-data/"):
                return self._answer(404)
            v = md.value(iid, rest[len("latest/meta-data/"):])
            return self._answer(404) if v is None else self._answer(200, v)

    return Handler
