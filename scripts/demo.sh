#!/usr/bin/env bash
# Runs slurmscale's main job locally: a real Slurm with cloud nodes backed by the moto EC2
# server, the slurmscale daemon, and a gang workload. As root, on Debian/Ubuntu.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m slurmscale.localcluster.demo "$@"
