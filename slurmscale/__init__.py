"""slurmscale: gang-aware elastic GPU capacity for Slurm on EC2."""

__version__ = "0.1.0"
