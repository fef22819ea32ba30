"""AWS Health's scheduled changes heard on the event queue, kept on the store's rows.

The interruption pass reads the queue and deletes each message once handled; the health pass
drains and replaces the node. Between the two the change is on the store (timers of kind
`SCHEDULED`, subject the instance, the change in the note), not handed from one pass to the
other in memory: a standby that takes over knows what the leader heard (the message is gone
from the queue by then), and neither pass needs the other to be built first."""

from __future__ import annotations

import json
import logging

from slurmscale.model import ScheduledEvent
from slurmscale.store.protocol import TimerStore
from slurmscale.store.rows import TimerKind

log = logging.getLogger(__name__)

SCHEDULED = TimerKind.SCHEDULED


def heard(store: TimerStore, instance_id: str, ev: ScheduledEvent, at: float) -> None:
    """Keep AWS Health's change `ev` for `instance_id` (heard at `at`)."""
    store.set_timers(SCHEDULED, {instance_id: at}, {instance_id: json.dumps(
        {"code": ev.code, "not_before": ev.not_before, "description": ev.description})})


def known(store: TimerStore, running: set[str]
          ) -> tuple[dict[str, ScheduledEvent], list[str]]:
    """The changes heard for the `running` instances (one read of the store a pass), and the
    instances no longer running whose changes are to be forgotten (the pass's `Timers`). A
    note that cannot be read is dropped with a warning (the instance status read names the
    change too, if EC2 lists it)."""
    notes = store.timer_notes(SCHEDULED)
    out = {}
    for iid, note in notes.items():
        if iid not in running:
            continue
        try:
            d = json.loads(note)
            nb = d["not_before"]
            out[iid] = ScheduledEvent(str(d["code"]), None if nb is None else float(nb),
                                      str(d.get("description", "")))
        except (ValueError, TypeError, KeyError):
            log.warning("scheduled change for %s unreadable on the store (%r): dropped", iid,
                        note)
    return out, sorted(notes.keys() - running)  # (each change has its note)
