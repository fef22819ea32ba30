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

RETRY = "ec2-retry"  # the store's timers of the endpoint's retry delay
SUBJECT = "ec2"


@dataclass
class EndpointRetry:
    """The growing delay before EC2 is asked again (`store`: where it is kept; None: this
    process's memory only)."""

    base_s: float
    cap_s: float = 60.0
    store: TimerStore | None = field(default=None, repr=False)
    failures: int = 0
    until: float = 0.0
    _loaded: bool = field(default=False, repr=False)

    def _delay(self) -> float:
        return min(self.cap_s, self.base_s * 2 ** (self.failures - 1))

    def _load(self) -> None:
        """The delay as the store has it (once: a leader's own writes keep it current)."""
        if self._loaded or self.store is None:
            return
        self._loaded = True
        since = self.store.timers(RETRY).get(SUBJECT)
        if since is None:
            return
        note = self.store.timer_notes(RETRY).get(SUBJECT, "")
        self.failures = int(note) if note.isdigit() and int(note) > 0 else 1
        self.until = since + self._delay()

    def failed(self, now: float) -> float:
        """Record one more failure; the delay before the next attempt (doubles, capped)."""
        self._load()
        self.failures += 1
        delay = self._delay()
        self.until = now + delay
        if self.store is not None:
            self.store.put_timers(RETRY, {SUBJECT: now}, {SUBJECT: str(self.failures)})
        return delay

    def answered(self) -> None:
        self._load()
        if self.failures and self.store is not None:
            self.store.put_timers(RETRY, {})
        self.failures, self.until = 0, 0.0

    def waiting(self, now: float) -> bool:
        self._load()
        return now < self.until

    def due(self) -> float:
        """When EC2 may be asked again (0: at once)."""
        self._load()
        return self.until
