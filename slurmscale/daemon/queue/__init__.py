"""What the daemon reads of the queue and the nodes and keeps between passes, for the
decisions: the config as the policy's knobs, the per-record rules, the kept view and its
check."""
