#!/usr/bin/env bash
# The dev cluster of docker-compose.slurm.yml in real containers, on a machine without a
# Docker engine of its own: a private engine (scripts/docker-engine.sh), the host's own CAs
# for the build (docker/local-ca/README), the services on the host's network on free
# loopback ports. As root.
#
#   scripts/devcluster-docker.sh up      # build, start; prints how to reach it
#   scripts/devcluster-docker.sh down    # containers, network and volumes removed, engine stopped
#
# With Docker of your own: docker-compose -f docker-compose.slurm.yml up --build
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SLURMSCALE_DOCKER_DIR:-/var/cache/slurmscale/docker}
export DOCKER_HOST="unix://$dir/docker.sock"
export SLURMSCALE_DEV_NETWORK=host
# vfs copies an image's layers whole for each container: more than docker-compose's default
# 60 s of patience on a loaded machine
export COMPOSE_HTTP_TIMEOUT=${COMPOSE_HTTP_TIMEOUT:-600}
compose=(docker-compose -p slurmscale-dev -f docker-compose.slurm.yml)
case "${1:-}" in
  up)
    scripts/docker-engine.sh start "$dir" >/dev/null
    cp /usr/local/share/ca-certificates/*.crt docker/local-ca/ 2>/dev/null || true
    free() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    export SLURMSCALE_DEV_PG_PORT=${SLURMSCALE_DEV_PG_PORT:-$(free)}
    export SLURMSCALE_DEV_MOTO_PORT=${SLURMSCALE_DEV_MOTO_PORT:-$(free)}
    export SLURMSCALE_DEV_METRICS_PORT=${SLURMSCALE_DEV_METRICS_PORT:-$(free)}
    "${compose[@]}" up --build -d
    echo "up: DOCKER_HOST=$DOCKER_HOST; PostgreSQL 127.0.0.1:$SLURMSCALE_DEV_PG_PORT, moto" \
         "127.0.0.1:$SLURMSCALE_DEV_MOTO_PORT, metrics 127.0.0.1:$SLURMSCALE_DEV_METRICS_PORT"
    echo "  DOCKER_HOST=$DOCKER_HOST ${compose[*]} exec cluster sh -c 'SLURM_CONF=/cluster/etc/slurm.conf sbatch -N 2 --gres=gpu:8 -p gpu-spot --wrap \"sleep 30\"'"
    ;;
  down)
    if [ -S "$dir/docker.sock" ]; then
      "${compose[@]}" down -v --remove-orphans || true
    fi
    scripts/docker-engine.sh stop "$dir"
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
