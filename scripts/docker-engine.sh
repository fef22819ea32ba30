#!/usr/bin/env bash
# A private Docker engine for the dev cluster, for machines without one of their own (or
# without registry access): Debian's dockerd with its own data root, exec root, socket and
# PID file under DIR, the vfs storage driver (no overlay mounts needed) and no iptables or
# bridge (containers use the host's network, or another service's). Stopped by its PID.
#
#   scripts/docker-engine.sh start [DIR]   # prints the DOCKER_HOST to use
#   scripts/docker-engine.sh stop [DIR]
#
# DIR defaults to /var/cache/slurmscale/docker. As root. Also makes the `debian:12` base image
# the dev cluster's Dockerfile builds from, when the engine has none: debootstrap bookworm from
# the Debian mirror apt already uses, then `docker import` (no registry is needed).
set -euo pipefail
cmd=${1:-}
dir=${2:-/var/cache/slurmscale/docker}
sock="$dir/docker.sock"
pidfile="$dir/docker.pid"
export DOCKER_HOST="unix://$sock"

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case "$cmd" in
  start)
    command -v dockerd >/dev/null || {
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io; }
    mkdir -p "$dir/root" "$dir/exec"
    if ! running; then
      setsid dockerd --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$pidfile" \
        --host "$DOCKER_HOST" --storage-driver vfs --iptables=false --ip6tables=false \
        --bridge=none >"$dir/dockerd.log" 2>&1 &
      for _ in $(seq 1 60); do
        docker version >/dev/null 2>&1 && break
        sleep 1
      done
      docker version >/dev/null 2>&1 || { tail -n 20 "$dir/dockerd.log" >&2; exit 1; }
    fi
    if ! docker image inspect debian:12 >/dev/null 2>&1; then
      mirror=$(grep -hoE '^(URIs:|deb) +\S+' /etc/apt/sources.list.d/*.sources \
                 /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security \
                 | head -n1 || true)
      case "$mirror" in
        http*) ;;
        *) echo "cannot find a Debian mirror in /etc/apt sources" >&2; exit 1 ;;
      esac
      command -v debootstrap >/dev/null || {
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
      rootfs="$dir/bookworm-rootfs"
      rm -rf "$rootfs"
      echo "making the debian:12 base image (debootstrap bookworm, a minute or two)" >&2
      debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1 \
        || { tail -n 20 "$dir/debootstrap.log" >&2; exit 1; }
      # the mirror the image's apt uses: the same one (the container builds with the host's
      # network)
      tar -C "$rootfs" -c . | docker import - debian:12 >/dev/null
      rm -rf "$rootfs"
    fi
    echo "DOCKER_HOST=$DOCKER_HOST"
    ;;
  stop)
    if running; then
      pid=$(cat "$pidfile")
      kill "$pid"
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$pidfile"
    # what dockerd leaves mounted under its roots (the default network namespace's bind mount)
    awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" || true
    done
    ;;
  *)
    echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
