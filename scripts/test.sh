#!/usr/bin/env bash
# Runs slurmscale's whole test suite: unit and property tests, then integration tests on a
# real local Slurm 22.05 (and 24.11 in a chroot) with the moto EC2 server. As root.
# PostgreSQL for the HA tests. Extra arguments go to pytest (e.g. scripts/test.sh -k gang).
# The integration tests mostly wait on Slurm and EC2 state, so they run 6 at a time
# (pytest-xdist; each test has its own cluster, ports and directory): SLURMSCALE_TEST_WORKERS.
# (On 2 cores, 4 at a time took 42 minutes with the CPU mostly idle, 6 take about 32: the
# Capacity Block scenarios wait out real windows of whole minutes.)
# Work stealing: a worker that runs dry takes tests queued for a busy one, so the last long
# scenarios do not wait in one worker's queue while the others idle.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
# lint and types first (the rules in pyproject.toml): a change that breaks them fails here
echo "== ruff check" && .venv/bin/python -m ruff check --no-cache slurmscale tests
echo "== mypy" && .venv/bin/python -m mypy
exec .venv/bin/python -m pytest -n "${SLURMSCALE_TEST_WORKERS:-6}" --dist worksteal "$@"
