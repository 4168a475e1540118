"""A compaction lease as the database holds it (docs/semantics.md#single-flight)."""

from __future__ import annotations

from dataclasses import dataclass

LEASE_RUNNING = "running"
LEASE_DONE = "done"


@dataclass(frozen=True)
class CompactionLease:
    """The row of ``compaction_leases`` for one session key, read with the database's
    clock (``now``, milliseconds) so that expiry is judged on one clock for every worker."""

    session_key: str
    session_id: str
    flight_key: str
    holder: str
    state: str
    acquired_at: int
    expires_at: int
    finished_at: int | None
    result: str | None
    now: int

    @property
    def running(self) -> bool:
        """Held by a worker whose lease has not lapsed."""
        return self.state == LEASE_RUNNING and self.expires_at > self.now

    def finished_within(self, milliseconds: int) -> bool:
        """Finished with a result no longer than ``milliseconds`` ago."""
        return (
            self.state == LEASE_DONE
            and self.result is not None
            and self.finished_at is not None
            and self.now - self.finished_at <= milliseconds
        )
