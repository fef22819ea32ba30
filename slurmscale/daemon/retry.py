"""EC2 not answering (connection refused, timeouts, 5xx, throttling past botocore's retries):
launches wait with a growing delay instead of failing the job, so a minute-long endpoint
outage costs a handful of calls and no requeue. In memory: a restarted daemon simply tries
at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EndpointRetry:
    base_s: float
    cap_s: float = 60.0
    failures: int = 0
    until: float = 0.0

    def failed(self, now: float) -> float:
        """Record one more failure; the delay before the next attempt (doubles, capped)."""
        self.failures += 1
        delay = min(self.cap_s, self.base_s * 2 ** (self.failures - 1))
        self.until = now + delay
        return delay

    def answered(self) -> None:
        self.failures, self.until = 0, 0.0

    def waiting(self, now: float) -> bool:
        return now < self.until
