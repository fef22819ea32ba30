"""slurmscale: gang-aware elastic GPU capacity for Slurm on EC2."""

# One per release, with its entry in CHANGELOG.md (a test holds the two together): `pip
# install --upgrade` takes a wheel only when this moved.
__version__ = "0.3.2"
