"""The daemon's and the node's IAM policies, from one source: the documents shipped as
docs/iam-policy.json and docs/node-iam-policy.json, whose placeholders (REGION, ACCOUNT_ID,
CLUSTER_NAME, ...) are filled either with values (`render`: `slurmscale aws-policy`) or with
CloudFormation references (`for_stack`: the stack's own policies). A statement whose
placeholder has no value here (no zone, no munge key parameter) is left out, never granted
on a wildcard."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from slurmscale.shipped import shipped

PLACEHOLDER = re.compile(r"\b(REGION|ACCOUNT_ID|CLUSTER_NAME|HOSTED_ZONE_ID|LAUNCH_TEMPLATE_ID"
                         r"|NODE_ROLE_NAME|QUEUE_NAME|MUNGE_KEY_PARAMETER)\b")
# the one placeholder a document may stand for several resources with (one per pool)
MANY = "LAUNCH_TEMPLATE_ID"


def document(which: str) -> dict[str, Any]:
    """The shipped policy document: "daemon" or "node"."""
    name = {"daemon": "iam-policy.json", "node": "node-iam-policy.json"}[which]
    return dict(json.loads(shipped(name).read_text()))


def placeholders(doc: dict[str, Any]) -> set[str]:
    return set(PLACEHOLDER.findall(json.dumps(doc)))


def _fill(value: Any, one: Mapping[str, str], many: Mapping[str, list[str]]) -> Any:
    """`value` with every placeholder replaced: strings by `one`; a string naming a MANY
    placeholder in a list becomes one string per value."""
    if isinstance(value, dict):
        return {k: _fill(v, one, many) for k, v in value.items()}
    if isinstance(value, list):
        out: list[Any] = []
        for v in value:
            if isinstance(v, str) and MANY in PLACEHOLDER.findall(v):
                out += [_fill(v.replace(MANY, m), one, many) for m in many[MANY]]
            else:
                out.append(_fill(v, one, many))
        return out
    if isinstance(value, str):
        if MANY in PLACEHOLDER.findall(value):  # (a lone resource string)
            return _fill([value], one, many)
        return PLACEHOLDER.sub(lambda m: one[m.group(1)], value)
    return value


def render(which: str, values: Mapping[str, str], templates: list[str]) -> dict[str, Any]:
    """The document with real values: statements naming a placeholder without one (or
    LAUNCH_TEMPLATE_ID with no `templates`) are left out."""
    doc = document(which)
    have = {k for k, v in values.items() if v} | ({MANY} if templates else set())
    doc["Statement"] = [_fill(st, values, {MANY: templates}) for st in doc["Statement"]
                        if placeholders(st) <= have]
    return doc


def for_stack(which: str, refs: Mapping[str, str], templates: list[str]) -> dict[str, Any]:
    """The document for a CloudFormation template: each placeholder becomes the `${...}`
    reference in `refs` (e.g. REGION -> "${AWS::Region}"), each string holding one wrapped in
    Fn::Sub; IAM's own policy variables (`${ec2:SourceInstanceARN}`) escaped for Fn::Sub as
    `${!...}`. Statements naming a placeholder `refs` lacks are left out."""
    doc = document(which)
    have = set(refs) | ({MANY} if templates else set())
    kept = [st for st in doc["Statement"] if placeholders(st) <= have]
    marked = _fill(_escape(kept), {k: f"\0{v}" for k, v in refs.items()},
                   {MANY: [f"\0{t}" for t in templates]})
    doc["Statement"] = _sub(marked)
    return doc


def _escape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _escape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape(v) for v in value]
    if isinstance(value, str):
        return value.replace("${", "${!")
    return value


def _sub(value: Any) -> Any:
    """Strings that took a reference (marked with NUL) wrapped in Fn::Sub; the others plain
    (with an escaped IAM variable unescaped again: only Fn::Sub reads `${!`)."""
    if isinstance(value, dict):
        return {k: _sub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sub(v) for v in value]
    if isinstance(value, str):
        plain = value.replace("\0", "")
        if "\0" in value and re.search(r"\$\{(?!!)", plain):
            return {"Fn::Sub": plain}
        return plain.replace("${!", "${")
    return value
