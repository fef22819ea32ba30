#!/usr/bin/env bash
# Installs what slurmscale's local cluster, demo and tests need on a Debian/Ubuntu machine,
# idempotently (as root): Slurm and munge from the distribution, a virtualenv in .venv with
# slurmscale and its dev and postgres extras, and (with --tests) what only the tests use:
# PostgreSQL's server (the HA tests), libfaketime (a step of the host's clock), Chromium
# (renders the HTML report), docker.io and docker-compose (the dev cluster in containers) and
# Debian trees with Slurm 24.11 (trixie) and 26.05 (sid).
set -euo pipefail
cd "$(dirname "$0")/.."
for_tests=0
[ "${1:-}" = "--tests" ] && for_tests=1

if [ "$(id -u)" -ne 0 ]; then
  echo "run as root: the local cluster starts slurmctld, slurmd and munged" >&2
  exit 1
fi

pkgs=(slurmctld slurmd slurm-client munge python3 python3-venv)
# (libfaketime: the daemon's host clock stepped under a test, its steady clock untouched)
# (systemd: systemd-analyze verifies the shipped units)
[ $for_tests -eq 1 ] && pkgs+=(debootstrap postgresql libfaketime systemd)
if [ $for_tests -eq 1 ]; then
  # Debian packages these; where a distribution does not (Ubuntu's chromium is a snap), the
  # tests that need them say so and skip outside CI
  [ -n "$(apt-cache search --names-only '^chromium$' 2>/dev/null)" ] || apt-get update -qq
  # (docker.io: the private engine test_devcluster_docker.py starts; docker-compose drives it)
  for opt in chromium docker-compose docker.io; do
    if [ -n "$(apt-cache search --names-only "^${opt}\$" 2>/dev/null)" ]; then pkgs+=("$opt"); fi
  done
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  # Debian's packages try to start their services; the local cluster runs its own, on
  # its own ports and socket, so a policy-rc.d keeps the package scripts from starting any.
  had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
  [ $had_policy -eq 1 ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  [ $had_policy -eq 1 ] || rm -f /usr/sbin/policy-rc.d
fi

# Slurm runs the hooks as SlurmUser (the local cluster's is Debian's unprivileged `slurm`, as in
# production), so the virtualenv's interpreter must be one that user can run: the
# distribution's /usr/bin/python3 when it is 3.11 or newer (Debian 12, 13), not one under
# root's 0700 home (pyenv's). A .venv on such an interpreter is made again.
py=${PYTHON:-}
if [ -z "$py" ]; then
  py=python3
  if /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    py=/usr/bin/python3
  fi
fi
if [ -x .venv/bin/python ] && id slurm >/dev/null 2>&1 \
    && ! runuser -u slurm -- .venv/bin/python -c '' 2>/dev/null; then
  echo "making .venv again: user slurm cannot run $(readlink -f .venv/bin/python)"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[dev,postgres]'
if id slurm >/dev/null 2>&1 && ! runuser -u slurm -- .venv/bin/python -c 'import slurmscale' \
    2>/dev/null; then
  echo "warning: user slurm cannot import slurmscale from $(pwd): the hooks the local cluster" \
       "runs as SlurmUser need this checkout readable by it (not under a 0700 home)" >&2
fi

if [ $for_tests -eq 1 ]; then
  # the newer Slurm releases the integration tests also run: 24.11 (trixie), 26.05 (sid)
  scripts/setup-slurm-chroot.sh "${SLURMSCALE_TEST_CHROOT:-/var/cache/slurmscale/trixie}" trixie
  scripts/setup-slurm-chroot.sh "${SLURMSCALE_TEST_CHROOT_SID:-/var/cache/slurmscale/sid}" sid
fi
echo "setup done: $(.venv/bin/slurmscale --version), $(slurmctld -V)"
