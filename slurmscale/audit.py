"""The audit log's vocabulary: every kind of event slurmscale records (`slurmscale events`,
the `events` table, `slurmscale_events_total{kind=...}`), and the one signature of the function
a pass records one with.

Kinds are members, not strings typed at each call: a misspelt kind fails the type check, and
the reports, `status` and the metrics match kinds by member. StrEnum: a member is its text, so
the table, the metrics' labels and every saved log read the same as before."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class Kind(StrEnum):
    # Slurm's requests and the hooks
    REQUEST_RECEIVED = "request_received"
    REQUEST_REJECTED = "request_rejected"
    SPOOL_REJECTED = "spool_rejected"
    SPOOL_UNWRITABLE = "spool_unwritable"
    RESUME_SKIPPED = "resume_skipped"
    RESUME_FAILED = "resume_failed"
    SUSPEND_EXCLUSIONS_SET = "suspend_exclusions_set"

    # launches
    LAUNCH_REQUESTED = "launch_requested"
    LAUNCHED = "launched"
    LAUNCH_FAILED = "launch_failed"
    LAUNCH_DEFERRED = "launch_deferred"
    LAUNCH_QUOTA_ERROR = "launch_quota_error"
    LAUNCH_CONFIG_ERROR = "launch_config_error"
    LAUNCH_RECOVERED = "launch_recovered"
    CAPACITY_UNAVAILABLE = "capacity_unavailable"
    CAPACITY_RESERVATION_MISSING = "capacity_reservation_missing"
    PLACEMENT_GROUP_DELETED = "placement_group_deleted"
    TAG_FAILED = "tag_failed"

    # releases and leaks
    RELEASED = "released"
    TERMINATED = "terminated"
    TERMINATE_FAILED = "terminate_failed"
    LEAK_TERMINATED = "leak_terminated"
    # a pool's warm pool of stopped instances (config_pool.WarmPool)
    WARM_STOPPED = "warm_stopped"
    WARM_STOP_FAILED = "warm_stop_failed"
    WARM_STARTED = "warm_started"
    WARM_START_REFUSED = "warm_start_refused"
    WARM_RETIRED = "warm_retired"
    UNTRACKED_INSTANCE = "untracked_instance"
    NODE_WITHOUT_INSTANCE = "node_without_instance"
    NODE_STUCK = "node_stuck"  # Slurm held a powered-down node DOWN: returned to service
    NODE_UNKNOWN = "node_unknown"

    # the capacity policy
    TARGET_RAISED = "target_raised"
    TARGET_LOWERED = "target_lowered"
    NODES_HELD = "nodes_held"
    NODES_UNHELD = "nodes_unheld"
    SCALE_DOWN = "scale_down"
    BUFFER_WARMED = "buffer_warmed"
    NODES_POWERED_DOWN = "nodes_powered_down"
    NODES_HELD_NO_CAPACITY = "nodes_held_no_capacity"
    CAPACITY_RETRY = "capacity_retry"
    NODES_RETURNED = "nodes_returned"
    JOB_PARTITION_REWRITTEN = "job_partition_rewritten"
    JOB_STEERED = "job_steered"
    STEER_FAILED = "steer_failed"

    # holds (Slurm reservations for gangs)
    RESERVATION_CREATE = "reservation_create"
    RESERVATION_EXTEND = "reservation_extend"
    RESERVATION_ATTACH = "reservation_attach"
    RESERVATION_RELEASE = "reservation_release"
    RESERVATION_FAILED = "reservation_failed"
    RESERVATION_RELEASED = "reservation_released"
    RESERVATION_RELEASE_PENDING = "reservation_release_pending"

    # interruptions, health and replacement
    SCHEDULED_EVENT = "scheduled_event"
    NODE_DRAINED_SCHEDULED = "node_drained_scheduled"
    REBALANCE_DRAINED = "rebalance_drained"
    NODE_EVACUATED = "node_evacuated"
    JOB_REQUEUED = "job_requeued"
    REQUEUE_FAILED = "requeue_failed"
    # a pool's grace_signal: the job signalled before its requeue; it left within its grace
    JOB_SIGNALLED = "job_signalled"
    SIGNAL_FAILED = "signal_failed"
    JOB_LEFT_IN_GRACE = "job_left_in_grace"
    BOOT_FAILED = "boot_failed"
    BOOT_REPLACED = "boot_replaced"
    BOOT_REPLACE_DEFERRED = "boot_replace_deferred"
    NODE_REPLACED = "node_replaced"
    NODE_REPLACE_LOOP = "node_replace_loop"
    NODE_ADDRESS_FIXED = "node_address_fixed"
    NODE_ADDRESS_RESET = "node_address_reset"
    DNS_RECORDS_CHANGED = "dns_records_changed"
    DNS_FAILED = "dns_failed"
    # EC2's network topology written into Slurm's topology.conf (and slurmctld reconfigured)
    TOPOLOGY_UPDATED = "topology_updated"
    TOPOLOGY_FAILED = "topology_failed"

    # Capacity Blocks
    BLOCK_DELIVERED = "block_delivered"
    BLOCK_EXPIRING = "block_expiring"
    BLOCK_RESERVATION = "block_reservation"
    BLOCK_RESERVATION_DELETED = "block_reservation_deleted"
    BLOCK_PARTITION_OPENED = "block_partition_opened"
    BLOCK_CLOSED = "block_closed"
    BLOCK_JOB_REQUEUED = "block_job_requeued"

    # the daemon itself
    LEADER_ACQUIRED = "leader_acquired"
    SLURM_READ_FAILED = "slurm_read_failed"
    SLURM_READ_OK = "slurm_read_ok"
    SLURM_UPDATE_FAILED = "slurm_update_failed"
    CLOUD_ERROR = "cloud_error"
    CLOCK_STEP = "clock_step"
    ROW_QUARANTINED = "row_quarantined"
    EVENT_DROPPED = "event_dropped"


class Event(Protocol):
    """Records one audit event (the reconciler's `event`: the store, the log, the metrics). The
    keywords name what it is about, as the table's columns do."""

    def __call__(self, kind: Kind, message: str, *, node: str | None = None,
                 request_id: str | None = None, gang_id: str | None = None) -> None: ...
