"""A Route 53 private hosted zone's A records for the cluster's nodes.

Route 53 API reference, ChangeResourceRecordSets: a change batch is applied as one
transaction (all of it or none); UPSERT creates a record or replaces its value; DELETE must
name the record exactly as it is (name, type, TTL and values), so records are listed before
they are deleted; a batch holds at most 1,000 ResourceRecord elements. ListResourceRecordSets
pages by StartRecordName/StartRecordType (IsTruncated, NextRecordName, NextRecordType)."""

from __future__ import annotations

from slurmscale.cloud.aws import call, make_client
from slurmscale.cloud.protocol import DnsRecord
from slurmscale.config import AwsSettings, DnsSettings

MAX_CHANGES = 1000  # ResourceRecord elements in one ChangeResourceRecordSets


class Route53Zone:
    """Implements `DnsZone`: the zone's A records under its domain, by node name."""

    def __init__(self, aws: AwsSettings, dns: DnsSettings) -> None:
        self.zone_id = dns.hosted_zone_id.removeprefix("/hostedzone/")
        self.domain = dns.domain.rstrip(".")
        self.ttl = dns.ttl_s
        self.client = make_client("route53", aws, aws.route53_endpoint_url or aws.endpoint_url)

    def _call(self, name: str, **kwargs: object) -> dict:
        return call(self.client, name, **kwargs)

    def records(self) -> dict[str, DnsRecord]:
        """Node name -> its A record, for every single-valued A record `<name>.<domain>`."""
        out: dict[str, DnsRecord] = {}
        suffix = f".{self.domain}."
        start: dict[str, str] = {}
        while True:
            page = self._call("list_resource_record_sets", HostedZoneId=self.zone_id,
                              MaxItems="300", **start)
            for r in page.get("ResourceRecordSets", []):
                name = str(r.get("Name", ""))
                values = r.get("ResourceRecords", [])
                if (r.get("Type") == "A" and name.endswith(suffix) and len(values) == 1
                        and "." not in name[:-len(suffix)]):
                    out[name[:-len(suffix)]] = DnsRecord(str(values[0]["Value"]),
                                                      int(r.get("TTL", self.ttl)))
            if not page.get("IsTruncated"):
                return out
            start = {"StartRecordName": page["NextRecordName"],
                     "StartRecordType": page.get("NextRecordType", "A")}

    def change(self, upsert: dict[str, str], delete: dict[str, DnsRecord]) -> None:
        """UPSERT each name -> IP, DELETE each listed record, in batches of MAX_CHANGES."""
        changes = [self._change("UPSERT", n, DnsRecord(ip, self.ttl)) for n, ip in
                   sorted(upsert.items())]
        changes += [self._change("DELETE", n, r) for n, r in sorted(delete.items())]
        for i in range(0, len(changes), MAX_CHANGES):
            self._call("change_resource_record_sets", HostedZoneId=self.zone_id,
                       ChangeBatch={"Comment": "slurmscale: cloud nodes",
                                    "Changes": changes[i:i + MAX_CHANGES]})

    def _change(self, action: str, name: str, r: DnsRecord) -> dict:
        return {"Action": action, "ResourceRecordSet": {
            "Name": f"{name}.{self.domain}.", "Type": "A", "TTL": r.ttl,
            "ResourceRecords": [{"Value": r.ip}]}}
