#!/usr/bin/env bash
# Builds a Debian tree with a newer Slurm than the host's and the few Python packages the
# slurmscale hooks need, so the local cluster can run that Slurm through chroot:
# trixie (Debian 13) carries Slurm 24.11, sid 26.05.
# Usage: scripts/setup-slurm-chroot.sh [DIR [SUITE]]   (as root)
#   DIR defaults to /var/cache/slurmscale/trixie; SUITE to DIR's last component (trixie, sid)
set -euo pipefail
dir=${1:-/var/cache/slurmscale/trixie}
suite=${2:-$(basename "$dir")}
case "$suite" in
  trixie|sid) ;;
  *) echo "unknown Debian suite '$suite' (trixie: Slurm 24.11, sid: 26.05)" >&2; exit 2 ;;
esac
marker="$dir/.slurmscale-ready"
if [ -f "$marker" ]; then
  echo "slurm chroot ready at $dir"; exit 0
fi
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
# Use the Debian mirror this machine's apt already uses.
mirror=$(grep -hoE '^(URIs:|deb) +\S+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list \
           2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
case "$mirror" in
  http*) ;;
  *) echo "cannot find a Debian mirror in /etc/apt sources" >&2; exit 1 ;;
esac
rm -rf "$dir"
mkdir -p "$dir"
echo "building a Debian $suite Slurm chroot in $dir (a minute or two)"
debootstrap --variant=minbase \
  --include=slurmctld,slurmd,slurm-client,munge,python3,python3-pydantic,python3-yaml,python3-hostlist \
  "$suite" "$dir" "$mirror" >"$dir.log" 2>&1 || { tail -n 30 "$dir.log" >&2; exit 1; }
chroot "$dir" slurmctld -V
touch "$marker"
