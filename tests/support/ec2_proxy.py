"""An HTTP proxy in front of the moto server that records EC2 calls and injects the faults
AWS really produces, in AWS's response shapes.

- `partial`: forward CreateFleet to moto (which launches everything), then answer as EC2 does
  when it could not fill the fleet: only `keep` of the instances listed, and an
  `errorSet` item with the capacity error code. The unlisted instances still exist in moto,
  exactly the leak a careless client would never see.
- `none`: answer CreateFleet with no instances and the error (what MinTargetCapacity gives).
- `short`: EC2 has only `keep` instances for this fleet: `none` when that is below its
  MinTargetCapacity, `partial` otherwise (what EC2 answers either way).
- `api_error`: answer with an EC2 API error (e.g. RequestLimitExceeded, HTTP 503).
- `delay`: answer as usual, `seconds` late (a slow CreateFleet, to act while it is in flight).
- `reclaimed`: instances AWS took back without any event reaching us: DescribeInstances shows
  them terminated with state reason Server.SpotInstanceTermination.
- `impaired` / `scheduled`: DescribeInstanceStatus shows these instances failing their
  instance status check, or with a scheduled event (code, NotBefore, description), in EC2's
  response shape (moto reports every running instance ok with no events).
- capacity reservations and placement groups, which moto lacks (`capacity`, ec2_capacity.py).
- StartInstances of a terminated instance: EC2 refuses it (IncorrectInstanceState), moto
  starts it; a started instance's LaunchTime is its start's on EC2, its first launch's on
  moto (`started_at`).
Loopback only: it listens on 127.0.0.1 and forwards only to the moto URL it is given.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import botocore.exceptions

from tests.support.ec2_capacity import CapacityModel

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"


@dataclass
class Fault:
    action: str
    kind: str  # partial | none | short | api_error | delay
    code: str = "InsufficientInstanceCapacity"
    message: str = "We currently do not have sufficient capacity in the Availability Zone."
    keep: int = 0
    status: int = 503
    times: int = 1
    skip: int = 0  # let this many matching calls through first (e.g. fail a gang's 3rd fleet)
    seconds: float = 0.0  # delay: how late the answer comes
    # CreateFleet only: fault launches of this capacity type alone (spot runs out, on-demand
    # does not), None: any
    capacity_type: str | None = None


@dataclass
class Call:
    action: str
    params: dict[str, str]
    status: int = 0
    at: float = field(default_factory=time.time)  # when the proxy received it (wall clock)
    done: float = 0.0  # when its answer was sent (wall clock)
    agent: str = ""  # its User-Agent (names the calling process: slurmscale/identity.py)


@dataclass
class EC2Proxy:
    upstream: str
    calls: list[Call] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    reclaimed: set[str] = field(default_factory=set)
    impaired: set[str] = field(default_factory=set)
    # instance -> (code, NotBefore ISO 8601, description)
    scheduled: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # the endpoint down: every request's connection is closed unanswered (botocore raises
    # ConnectionClosedError after its retries, as for a load balancer dropping connections)
    refusing: bool = False
    capacity: CapacityModel = field(init=False)
    # how often EC2's own clock is looked at (a block's end comes whether or not anyone calls)
    clock_interval_s: float = 0.5
    # EC2's clock against this host's: its answers' Date (as the moto server behind it, run
    # that far ahead: ClusterOptions.aws_clock_ahead_s)
    clock_ahead_s: float = 0.0
    # instance -> when a StartInstances started it (EC2's clock): DescribeInstances then
    # shows it as its LaunchTime, as EC2 does ("the time that the instance was last
    # launched": EC2 API reference, Instance) and moto does not
    started_at: dict[str, float] = field(default_factory=dict)
    _stopped: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.capacity = CapacityModel(upstream=lambda: self.upstream)

    def start(self) -> EC2Proxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def date_time_string(self, timestamp: float | None = None) -> str:
                return super().date_time_string(
                    (time.time() if timestamp is None else timestamp) + proxy.clock_ahead_s)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                params = dict(urllib.parse.parse_qsl(body.decode()))
                call = Call(params.get("Action", ""), params,
                            agent=self.headers.get("User-Agent", ""))
                proxy.calls.append(call)
                if proxy.refusing:
                    call.status = -1
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if call.action in proxy.capacity.SERVED:
                    self._reply(*proxy.capacity.serve(call.action, params), call)
                    return
                refused = (proxy.capacity.refuse_fleet(params)
                           if call.action == "CreateFleet" else None)
                if refused:
                    self._reply(*refused, call)
                    return
                proxy._expire_blocks()  # (at this request's time too, not a tick later)
                reserved = (proxy.capacity.reserved_fleet(params)
                            if call.action == "CreateFleet" else None)
                if reserved is not None:
                    asked = int(params["TargetCapacitySpecification.TotalTargetCapacity"])
                    names = ",".join(r.id for r in reserved[0])
                    short = Fault("CreateFleet", "partial", message=(
                        f"Insufficient capacity in capacity reservation(s) {names}: "
                        f"{reserved[1]} of {asked} available"))
                    if reserved[1] == 0:
                        self._reply(200, _fleet_response("fleet-00000000-reserved", [],
                                                         short, params), call)
                        return
                    body = _as_on_demand(params, reserved[1])
                if call.action == "StartInstances":
                    stale = proxy._not_startable(params)
                    if stale:
                        self._reply(400, _api_error("IncorrectInstanceState", (
                            f"The instance '{stale}' is not in a state from which it can "
                            "be started.")), call)
                        return
                fault = proxy._take_fault(call)
                if fault and fault.kind == "short":
                    fault = replace(fault, kind="none" if fault.keep < _min_target(params)
                                    else "partial")
                if fault and fault.kind == "delay":
                    time.sleep(fault.seconds)
                if fault and fault.kind == "api_error":
                    self._reply(fault.status, _api_error(fault.code, fault.message), call)
                    return
                if fault and fault.kind == "none":
                    self._reply(200, _fleet_response("fleet-00000000-injected", [], fault, params),
                                call)
                    return
                status, data = proxy._forward(self.path, body, dict(self.headers))
                if call.action == "CreateFleet" and status == 200:
                    proxy.capacity.fleet_launched(params, _fleet_instances(data),
                                                  reserved[0] if reserved else None)
                    if reserved is not None and reserved[1] < asked:
                        data = _rewrite_partial(data, replace(short, keep=reserved[1]), params)
                if call.action == "TerminateInstances" and status == 200:
                    proxy.capacity.terminated(params)
                if call.action == "StartInstances" and status == 200:
                    for k, v in params.items():
                        if k.startswith("InstanceId."):
                            proxy.started_at[v] = time.time() + proxy.clock_ahead_s
                if call.action == "DescribeInstances" and status == 200 and proxy.started_at:
                    data = _rewrite_launch_times(data, proxy.started_at)
                if call.action == "DescribeInstances" and status == 200:
                    data = _rewrite_reservations(data, proxy.capacity.in_reservation())
                if fault and fault.kind == "partial" and status == 200:
                    data = _rewrite_partial(data, fault, params)
                if call.action == "DescribeInstanceStatus" and status == 200 and (
                        proxy.impaired or proxy.scheduled):
                    data = _rewrite_status(data, proxy.impaired, proxy.scheduled)
                if call.action == "DescribeInstances" and proxy.reclaimed and status == 200:
                    data = _rewrite_reclaimed(data, proxy.reclaimed)
                self._reply(status, data, call)

            def _reply(self, status: int, data: bytes, call: Call) -> None:
                call.status = status
                call.done = time.time()
                self.send_response(status)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._ec2_clock, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def _ec2_clock(self) -> None:
        """What EC2 does on its own clock, whether or not the daemon calls: a block's
        instances are terminated from `termination_lead_s` before its end. (Done only when a
        request came in, a test's outcome hung on whether the daemon happened to call EC2
        between that moment and the job's end.)"""
        while not self._stopped.wait(self.clock_interval_s):
            try:
                self._expire_blocks()
            except (OSError, botocore.exceptions.BotoCoreError):  # moto gone first at teardown
                return

    def _expire_blocks(self) -> None:
        gone = self.capacity.expire_blocks()
        if gone:  # EC2 takes a block's instances back before its end
            self._terminate_upstream(gone)

    def _take_fault(self, call: Call) -> Fault | None:
        kind = call.params.get("TargetCapacitySpecification.DefaultTargetCapacityType")
        for f in self.faults:
            if f.capacity_type is not None and f.capacity_type != kind:
                continue
            if f.action == call.action and f.times > 0:
                if f.skip > 0:
                    f.skip -= 1
                    continue
                f.times -= 1
                return f
        return None

    def _not_startable(self, params: dict[str, str]) -> str:
        """The first instance of a StartInstances that is terminated or shutting down (moto
        starts it; EC2 refuses with IncorrectInstanceState), or ""."""
        ids = [v for k, v in sorted(params.items()) if k.startswith("InstanceId.")]
        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=self.upstream,
                           aws_access_key_id="testing", aws_secret_access_key="testing")  # noqa: S106
        for res in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
            for inst in res["Instances"]:
                if inst["State"]["Name"] in ("shutting-down", "terminated"):
                    return str(inst["InstanceId"])
        return ""

    def _terminate_upstream(self, ids: list[str]) -> None:
        """EC2 itself terminates these (a signed call, as moto routes an unsigned one to S3,
        where it did nothing: before, no block's instance was ever taken back)."""
        boto3.client("ec2", region_name="us-east-1", endpoint_url=self.upstream,
                     aws_access_key_id="testing", aws_secret_access_key="testing"  # noqa: S106
                     ).terminate_instances(InstanceIds=ids)

    def _forward(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        req = urllib.request.Request(self.upstream + path, data=body, method="POST",
                                     headers={k: v for k, v in headers.items()
                                              if k.lower() not in {"host", "content-length"}})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def fleet_calls(self) -> list[Call]:
        """CreateFleet calls that reached EC2 (not those the proxy refused)."""
        return [c for c in self.calls if c.action == "CreateFleet" and c.status != -1]


def _min_target(params: dict[str, str]) -> int:
    """A CreateFleet's MinTargetCapacity (spot or on-demand options; absent: 0)."""
    return int(params.get("SpotOptions.MinTargetCapacity")
               or params.get("OnDemandOptions.MinTargetCapacity") or 0)


def _api_error(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}'
            f"</Code><Message>{message}</Message></Error></Errors>"
            "<RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>").encode()


def _overrides(params: dict[str, str]) -> list[tuple[str, str]]:
    """A CreateFleet's overrides, (InstanceType, SubnetId) in the order sent."""
    out = []
    for k in range(1, 1000):
        itype = params.get(f"LaunchTemplateConfigs.1.Overrides.{k}.InstanceType")
        if itype is None:
            return out
        out.append((itype, params.get(f"LaunchTemplateConfigs.1.Overrides.{k}.SubnetId", "")))
    return out


def _fleet_response(fleet_id: str, groups: list[tuple[str, str, list[str]]],
                    fault: Fault, params: dict[str, str]) -> bytes:
    """A CreateFleet response as EC2 writes it: instances that launched plus an errorSet,
    one error for each override EC2 could not fill (CreateFleetError: errorCode,
    errorMessage, launchTemplateAndOverrides with the overrides as sent, lifecycle): where
    nothing launched, every override (EC2 tried them all); where some did, the first."""
    items = "".join(
        f"<item><lifecycle>{life}</lifecycle><instanceType>{itype}</instanceType>"
        f"<instanceIds>{''.join(f'<item>{i}</item>' for i in ids)}</instanceIds></item>"
        for life, itype, ids in groups if ids)
    life = "spot" if params.get("TargetCapacitySpecification.DefaultTargetCapacityType") \
        == "spot" else "on-demand"
    tried = _overrides(params)
    tried = tried if not any(ids for _, _, ids in groups) else tried[:1]
    err = "<errorSet>" + "".join(
        f"<item><errorCode>{fault.code}</errorCode><errorMessage>{fault.message}"
        "</errorMessage><launchTemplateAndOverrides><overrides>"
        f"<instanceType>{itype}</instanceType><subnetId>{subnet}</subnetId>"
        f"</overrides></launchTemplateAndOverrides><lifecycle>{life}</lifecycle></item>"
        for itype, subnet in (tried or [("", "")])) + "</errorSet>"
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{NS}">'
            f"<requestId>00000000-0000-0000-0000-000000000001</requestId>"
            f"<fleetId>{fleet_id}</fleetId>{err}<fleetInstanceSet>{items}</fleetInstanceSet>"
            "</CreateFleetResponse>").encode()


def _rewrite_partial(data: bytes, fault: Fault, params: dict[str, str]) -> bytes:
    root, q = _doc(data)
    fleet_id = root.findtext(q("fleetId"), default="")
    groups: list[tuple[str, str, list[str]]] = []
    left = fault.keep
    for item in root.findall(f"{q('fleetInstanceSet')}/{q('item')}"):
        ids = [i.text or "" for i in item.findall(f"{q('instanceIds')}/{q('item')}")]
        kept, left = ids[:left], max(0, left - len(ids))
        groups.append((item.findtext(q("lifecycle"), default="spot"),
                       item.findtext(q("instanceType"), default=""), kept))
    return _fleet_response(fleet_id, groups, fault, params)


def _doc(data: bytes) -> tuple[ET.Element, Callable[[str], str]]:
    """An EC2 answer parsed, and a function naming a tag in its namespace (moto's lacks the
    final slash of EC2's); written back with the same default namespace."""
    root = ET.fromstring(data)
    uri = root.tag[1:].split("}")[0] if root.tag.startswith("{") else ""
    ET.register_namespace("", uri)

    def q(tag: str) -> str:
        return f"{{{uri}}}{tag}" if uri else tag
    return root, q


def _rewrite_reclaimed(data: bytes, reclaimed: set[str]) -> bytes:
    """Show `reclaimed` instances as EC2 does after a spot reclaim."""
    root, q = _doc(data)
    for inst in root.iter(q("item")):
        if inst.findtext(q("instanceId")) not in reclaimed:
            continue
        state = inst.find(q("instanceState"))
        if state is not None:
            for child, text in (("code", "48"), ("name", "terminated")):
                el = state.find(q(child))
                if el is not None:
                    el.text = text
        for old in inst.findall(q("stateReason")) + inst.findall(q("reason")):
            inst.remove(old)
        reason = ET.SubElement(inst, q("stateReason"))
        ET.SubElement(reason, q("code")).text = "Server.SpotInstanceTermination"
        ET.SubElement(reason, q("message")).text = (
            "Server.SpotInstanceTermination: Spot instance termination")
    return ET.tostring(root, xml_declaration=True, encoding="UTF-8")


def _rewrite_launch_times(data: bytes, started_at: dict[str, float]) -> bytes:
    """An instance started since its launch shows its start as its launchTime."""
    root, q = _doc(data)
    for inst in root.iter(q("item")):
        at = started_at.get(inst.findtext(q("instanceId")) or "")
        el = inst.find(q("launchTime"))
        if at is not None and el is not None:
            el.text = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return ET.tostring(root, xml_declaration=True, encoding="UTF-8")


def _rewrite_status(data: bytes, impaired: set[str],
                    scheduled: dict[str, tuple[str, str, str]]) -> bytes:
    """DescribeInstanceStatus as EC2 answers for an instance whose instance status check
    failed (status impaired, reachability failed) or that has a scheduled event."""
    root, q = _doc(data)
    for item in list(root.iterfind(f"{q('instanceStatusSet')}/{q('item')}")):
        iid = item.findtext(q("instanceId"))
        if iid in impaired:
            st = item.find(q("instanceStatus"))
            if st is not None:
                for el in st.iterfind(f"{q('details')}/{q('item')}/{q('status')}"):
                    el.text = "failed"
                top = st.find(q("status"))
                if top is not None:
                    top.text = "impaired"
        if iid is not None and iid in scheduled:
            code, not_before, description = scheduled[iid]
            events = ET.SubElement(item, q("eventsSet"))
            ev = ET.SubElement(events, q("item"))
            ET.SubElement(ev, q("instanceEventId")).text = f"instance-event-{iid[2:19]:0>17}"
            ET.SubElement(ev, q("code")).text = code
            ET.SubElement(ev, q("description")).text = description
            ET.SubElement(ev, q("notBefore")).text = not_before
    return ET.tostring(root, xml_declaration=True, encoding="UTF-8")


def _fleet_instances(data: bytes) -> list[str]:
    """The instance ids in a CreateFleet answer."""
    root, q = _doc(data)
    return [i.text for i in root.iter(q("item")) if i.text and i.text.startswith("i-")]


def _rewrite_reservations(data: bytes, where: dict[str, str]) -> bytes:
    """Instances inside a capacity reservation carry its id, as EC2 shows them."""
    if not where:
        return data
    root, q = _doc(data)
    for inst in root.iter(q("item")):
        cr = where.get(inst.findtext(q("instanceId")) or "")
        if cr and inst.find(q("capacityReservationId")) is None:
            ET.SubElement(inst, q("capacityReservationId")).text = cr
    return ET.tostring(root, xml_declaration=True, encoding="UTF-8")


def _as_on_demand(params: dict[str, str], n: int) -> bytes:
    """A fleet into reservations as moto can launch it: `n` on-demand instances."""
    p = dict(params)
    tcs = "TargetCapacitySpecification."
    p[tcs + "DefaultTargetCapacityType"] = "on-demand"
    p[tcs + "TotalTargetCapacity"] = p[tcs + "OnDemandTargetCapacity"] = str(n)
    if "OnDemandOptions.MinTargetCapacity" in p:
        p["OnDemandOptions.MinTargetCapacity"] = str(n)
    for k in [k for k in p if k.startswith("ReservedCapacityOptions.")]:
        del p[k]  # (moto knows no reserved-capacity fleet)
    return urllib.parse.urlencode(p).encode()
