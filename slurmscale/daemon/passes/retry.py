"""EC2 not answering (connection refused, timeouts, 5xx, throttling past botocore's retries):
launches wait with a growing delay instead of failing the job, so a minute-long endpoint
outage costs a handful of calls and no requeue.

The delay is on the store (timers of kind `RETRY`: when the last call went unanswered, and
in its note how many in a row), so a standby that takes over in the middle of an outage
waits out the delay the leader was waiting out instead of asking EC2 at once; a call EC2
answers clears it."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmscale.store.protocol import TimerStore
from slurmscale.store.rows import TimerKind

RETRY = TimerKind.EC2_RETRY  # the store's timer of the endpoint's retry delay
SUBJECT = "ec2"
# The count of failures in a row is kept up to here: past the doublings the cap is reached
# long before, and a count read back from the store (a note anyone may have edited) is
# clamped to it before it is parsed (a note of a million digits parses slowly).
MAX_COUNT = 1_000_000
_MAX_DOUBLINGS = 60  # 2**60 times any sane base is past any cap, and no float overflow


@dataclass
class EndpointRetry:
    """The growing delay before EC2 is asked again (`store`: where it is kept, read at each
    ask, so that a daemon that leads again after another did never goes by what it
    remembered; None: this process's memory only)."""

    base_s: float
    cap_s: float = 60.0
    store: TimerStore | None = field(default=None, repr=False)
    failures: int = 0
    until: float = 0.0

    def _delay(self) -> float:
        """base * 2^(failures - 1), capped; the exponent is bounded before the power (at
        1,025 failures in a row the float power overflowed: every later launch raised)."""
        return min(self.cap_s, self.base_s * 2.0 ** min(max(self.failures - 1, 0),
                                                         _MAX_DOUBLINGS))

    def _load(self) -> None:
        """The delay as the store has it."""
        if self.store is None:
            return
        since = self.store.timers(RETRY).get(SUBJECT)
        if since is None:
            self.failures, self.until = 0, 0.0
            return
        note = self.store.timer_notes(RETRY).get(SUBJECT, "").strip()
        if not note.isdigit() or note.strip("0") == "":
            self.failures = 1
        else:
            self.failures = MAX_COUNT if len(note) > len(str(MAX_COUNT)) else min(
                int(note), MAX_COUNT)
        self.until = since + self._delay()

    def failed(self, now: float) -> float:
        """Record one more failure; the delay before the next attempt (doubles, capped)."""
        self._load()
        self.failures = min(self.failures + 1, MAX_COUNT)
        delay = self._delay()
        self.until = now + delay
        if self.store is not None:
            self.store.set_timers(RETRY, {SUBJECT: now}, {SUBJECT: str(self.failures)})
        return delay

    def answered(self) -> None:
        self._load()
        if self.failures and self.store is not None:
            self.store.end_timers(RETRY, [SUBJECT])
        self.failures, self.until = 0, 0.0

    def waiting(self, now: float) -> bool:
        self._load()
        return now < self.until

    def due(self) -> float:
        """When EC2 may be asked again (0: at once)."""
        self._load()
        return self.until
