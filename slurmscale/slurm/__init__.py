"""The Slurm boundary: one protocol, a CLI backend, and parsers for what Slurm hands us."""
