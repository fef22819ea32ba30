#!/usr/bin/env bash
# Runs slurmscale's whole test suite: unit and property tests, then integration tests on a
# real local Slurm 22.05 (and 24.11 in a chroot) with the moto EC2 server. As root.
# Extra arguments go to pytest (e.g. scripts/test.sh -k gang).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --chroot
exec .venv/bin/python -m pytest "$@"
