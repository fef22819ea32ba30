"""The daemon's time: the wall clock as it read when the daemon started, carried on by the
monotonic clock, so that a step of the host's clock (NTP setting it, an admin's `date`, a VM
resumed) moves none of the intervals the daemon measures (idle, grace, backoff, boot and hold
timers), and the era record that reads other programs' times into that frame.

Why not the wall clock: every timer is a difference between now and a time recorded earlier;
a step of +1 hour makes every idle node look an hour idler (all released at once), every
booting node an hour late (all replaced), every backoff over. Why not the monotonic clock
alone: the store, Slurm and EC2 speak in calendar times. So the daemon's clock is
`monotonic + base` (its *steady* time), equal to the wall clock until the first step, and
every time that comes from outside is read into it:

- Slurm's (and the hooks') times are the host's wall clock of the moment they were written.
  Each step starts an era; a time is read in the era whose wall-clock span holds it, the
  newest first. After a forward step the spans are disjoint and every time is read exactly.
  After a backward step of D the last D seconds before it and the first D after it look
  alike: such a time is read as the newer one, so a timer that ran since before the step is
  read up to D younger: it fires later than it should, never earlier (nothing is released,
  replaced or requeued early).
- AWS's times (a spot warning's, a Capacity Block's start and end) are true times. The
  daemon learns true time from AWS's own answers (every answer's HTTP `Date`, whole
  seconds: `true_offset`, true - steady) and reads AWS's times with it, so a host clock an
  hour off (stepped before the daemon started, or after) gives a spot warning 120 s, not an
  hour. Until an answer has come, they are read with the current offset, as the host's clock
  reads now. Times slurmscale keeps for AWS's deadlines (a grace's requeue) are stored as
  true times, so a daemon restarted after a step reads them right (daemon/passes/graces.py).
- Times slurmscale writes to Slurm (a reservation's start and end) go out in the host's
  current wall clock.

A step is a change of (wall - monotonic) by more than `STEP_S`; smaller changes (NTP's slew)
are followed, so the steady time never drifts from the wall clock but by the steps. The
daemon records each step (`clock_step`). Its own records (the store's timestamps) stay in its
steady time until it restarts, since its timers compare with them; a restart reads the wall
clock afresh. The audit log's event times are the exception: they are read by people beside
slurmctld's log, so they are the host's clock of the moment (`daemon/context.host_now`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# A change of (wall - monotonic) larger than this is a step of the wall clock.
STEP_S = 2.0
# AWS's clock off the host's, or moved against the steady time, by more than this: taken as
# the true offset (a Date header has whole seconds, and an answer takes its time: smaller
# differences are noise, and the host's clock is kept)
TRUE_STEP_S = 2.0


@dataclass(frozen=True)
class Era:
    """From `wall_from` on (the host's clock just after a step), wall - steady = `offset`."""

    wall_from: float
    offset: float


class Frame:
    def __init__(self, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self._wall, self._mono = wall, mono
        self.base = wall() - mono()  # steady = monotonic + base
        self.offset = 0.0  # wall - steady now: the sum of the steps
        self.eras: list[Era] = []  # one per step, oldest first
        self.true_offset: float | None = None  # true - steady, from AWS's answers
        # only the daemon learns (daemon/service.py): a command's or a test's AWS answers
        # would otherwise move the times of a simulation run in the same process
        self.learns_true = False
        self._lock = threading.Lock()

    def now(self) -> float:
        """The steady time now (Unix seconds); notices a step of the wall clock."""
        w, m = self._wall(), self._mono()
        with self._lock:
            steady = m + self.base
            d = w - steady - self.offset
            if abs(d) > STEP_S:
                self.offset += d
                self.eras.append(Era(w, self.offset))
            elif d:
                self.base += d  # (a slew: followed)
                steady += d
            return steady

    def offset_of(self, t: float) -> float:
        """The offset of the era in which the host's clock read `t` (the newest that did)."""
        for era in reversed(self.eras):
            if t >= era.wall_from:
                return era.offset
        return 0.0

    def from_host(self, t: float) -> float:
        """A time the host's clock gave (Slurm's, a hook's) as a steady time."""
        return t - self.offset_of(t) if self.eras else t

    def learn_true(self, aws_now: float) -> None:
        """AWS's clock as an answer gave it (its Date header: whole seconds, so the true time
        of the answer was in [aws_now, aws_now + 1)), against the steady time now."""
        if not self.learns_true:
            return
        sample = aws_now + 0.5 - self.now()
        with self._lock:
            if abs(sample - self.offset) <= TRUE_STEP_S:
                # the host's clock agrees with AWS's as closely as a Date header can say:
                # read AWS's times by it, exactly as before (a header's whole seconds would
                # move a block's close by a second)
                self.true_offset = None
            elif self.true_offset is None or abs(sample - self.true_offset) > TRUE_STEP_S:
                self.true_offset = sample

    def _true(self) -> float:
        return self.offset if self.true_offset is None else self.true_offset

    def from_true(self, t: float) -> float:
        """A true time (AWS's) as a steady time: by AWS's clock once an answer has given it,
        else by the host's clock as it reads now."""
        return t - self._true()

    def to_true(self, t: float) -> float:
        """A steady time as a true time (what is stored for AWS's deadlines)."""
        return t + self._true()

    def to_host(self, t: float) -> float:
        """A steady time as the host's clock reads it now (what Slurm is told)."""
        return t + self.offset


FRAME = Frame()


def install(frame: Frame) -> Frame:
    """Make `frame` the process's (the daemon at start-up, a test); returns the one before."""
    global FRAME
    before, FRAME = FRAME, frame
    return before
