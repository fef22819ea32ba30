"""Where a pass's effects are applied: one executor per pass context, one error policy per
kind, the only place the daemon writes to Slurm, EC2, the event queue, Route 53 or Slurm's
files."""
