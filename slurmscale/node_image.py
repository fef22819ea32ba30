"""The node image recipe: the steps that turn a GPU base image (a deep-learning base AMI of
Ubuntu, Debian or Amazon Linux with its NVIDIA driver) into a slurmscale node, as one shell
script (`slurmscale node-image`) and as an EC2 Image Builder component that runs the same
script (`slurmscale node-image --component`). docs/node-image.md.

What the script does, in order, and refuses to finish without:
1. Slurm's slurmd (and scontrol) of the head node's release and version, from the image's
   package sources pinned to that version, or from the site's own packages of it
   (SLURM_PACKAGES=DIR: a Slurm built from the head node's source, where the distribution
   carries another release); `slurmd -V` must then say that version.
2. munge and Python 3; munged enabled at boot, slurmd NOT enabled (the bootstrap starts it as
   the node its tag names: a slurmd started by its unit registers under the host name).
3. The munge key: baked from MUNGE_KEY_FILE, or removed (the package's random one), for each
   node to read the cluster's at boot from `aws.munge_key_parameter`.
4. The bootstrap itself at /usr/local/lib/slurmscale/node-init.py (the same file the user
   data installs; baked in, a short user data could run it), checked to run: in the script
   form. Image Builder's inline component document is at most 16,000 characters (its API
   reference, CreateComponent `data`), which the packed bootstrap nearly fills alone: the
   component leaves it to the user data (the stack's templates carry it)."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

from slurmscale import node_init
from slurmscale.cli_node import INSTALL_PATH

COMPONENT_DATA_LIMIT = 16000

SCRIPT = r"""#!/bin/bash
# slurmscale node image recipe (rendered by `slurmscale node-image`; docs/node-image.md).
# Run as root on a builder of a GPU base image that has its NVIDIA driver. Environment:
#   SLURM_VERSION   the head node's Slurm (`slurmctld -V`), exactly         (default @VERSION@)
#   SLURM_PACKAGES  a directory of the site's own Slurm packages of that version (.deb/.rpm)
#   MUNGE_KEY_FILE  bake this munge key in (else nodes read it at boot: aws.munge_key_parameter)
set -euo pipefail
SLURM_VERSION=${SLURM_VERSION:-@VERSION@}
SLURM_PACKAGES=${SLURM_PACKAGES:-}
MUNGE_KEY_FILE=${MUNGE_KEY_FILE:-}
NODE_INIT=@NODE_INIT@
say() { echo "slurmscale-node-image: $*"; }
die() { echo "slurmscale-node-image: $*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
[ "$(id -u)" = 0 ] || die "run as root"
[ -n "$SLURM_VERSION" ] || die "SLURM_VERSION is not set (the head node's slurmctld -V)"
slurmd_version() { slurmd -V 2>/dev/null | awk '{print $2}'; }
version_ok() {
  local v; v=$(slurmd_version)
  [ "$v" = "$SLURM_VERSION" ] || [ "${v#"$SLURM_VERSION".}" != "$v" ]
}
# 1-2. slurmd, scontrol, munge, python3
if [ -n "$SLURM_PACKAGES" ]; then
  ls "$SLURM_PACKAGES"/*.deb "$SLURM_PACKAGES"/*.rpm >/dev/null 2>&1 \
    || die "SLURM_PACKAGES=$SLURM_PACKAGES holds no .deb or .rpm"
  if have apt-get; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$SLURM_PACKAGES"/*.deb munge python3
  else
    dnf install -y "$SLURM_PACKAGES"/*.rpm munge python3
  fi
elif have apt-get; then
  want=()
  version_ok || want+=("slurmd=${SLURM_VERSION}*" "slurm-client=${SLURM_VERSION}*")
  for p in munge python3; do dpkg -s "$p" >/dev/null 2>&1 || want+=("$p"); done
  if [ ${#want[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${want[@]}" || die "cannot install ${want[*]}: where the image's" \
      "sources carry no Slurm $SLURM_VERSION, build it from the head node's source and give" \
      "SLURM_PACKAGES=DIR"
  fi
elif have dnf; then
  version_ok || dnf install -y "slurm-slurmd-${SLURM_VERSION}*" "slurm-${SLURM_VERSION}*" \
    || die "no Slurm $SLURM_VERSION in this image's repositories: give SLURM_PACKAGES=DIR"
  dnf install -y munge python3
else
  die "neither apt-get nor dnf: install slurmd $SLURM_VERSION, munge and python3 yourself"
fi
version_ok || die "slurmd is '$(slurmd_version)', not $SLURM_VERSION: the head node would refuse it"
have scontrol || die "no scontrol beside slurmd"
have python3 || die "no python3 (the bootstrap needs 3.8 or newer)"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' || die "python3 older than 3.8"
# slurmd is started by the bootstrap as its node, never by its unit; munged at every boot
if have systemctl; then
  systemctl disable slurmd.service >/dev/null 2>&1 || true
  systemctl enable munge.service >/dev/null 2>&1 || die "cannot enable munge.service"
else  # (a chroot or container without systemd: the links the packages made)
  rm -f /etc/systemd/system/*.wants/slurmd.service
fi
# 3. the munge key
mkdir -p /etc/munge
if [ -n "$MUNGE_KEY_FILE" ]; then
  install -m 0400 "$MUNGE_KEY_FILE" /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  say "munge key baked in from $MUNGE_KEY_FILE"
else
  rm -f /etc/munge/munge.key
  say "no munge key in the image: each node reads the cluster's at boot (aws.munge_key_parameter)"
fi
@BOOTSTRAP@if have apt-get; then apt-get clean; fi
say "done: slurmd $(slurmd_version), $(python3 --version 2>&1), @WHERE@"
"""
BOOTSTRAP = r"""# 4. the bootstrap
mkdir -p "$(dirname "$NODE_INIT")"
base64 -d <<'EOF' | gzip -dc > "$NODE_INIT"
@PACKED@EOF
chmod 0755 "$NODE_INIT"
python3 "$NODE_INIT" --help >/dev/null || die "$NODE_INIT does not run"
"""


def render_script(slurm_version: str, bootstrap: bool = True) -> str:
    """The recipe; `bootstrap`: with the node bootstrap baked in (else the user data brings
    it at first boot, as the stack's launch templates do)."""
    packed = base64.encodebytes(gzip.compress(Path(node_init.__file__).read_bytes(),
                                              mtime=0)).decode()
    return (SCRIPT.replace("@BOOTSTRAP@", BOOTSTRAP.replace("@PACKED@", packed) if bootstrap
                           else "# 4. the bootstrap: the user data brings it at first boot\n")
            .replace("@WHERE@", "bootstrap at $NODE_INIT" if bootstrap
                     else "bootstrap from the user data")
            .replace("@VERSION@", slurm_version).replace("@NODE_INIT@", INSTALL_PATH))


def render_component(slurm_version: str) -> str:
    """The EC2 Image Builder component document (YAML) that runs the same script, then
    checks the result in its validate phase. Without the bootstrap baked in: the document
    must stay under Image Builder's 16,000 characters, and the stack's user data installs
    the bootstrap at each node's first boot (the script form bakes it in)."""
    from slurmscale.stack.template import dump_yaml

    doc = {
        "name": "slurmscale-node",
        "description": f"A slurmscale node: slurmd {slurm_version}, munge, Python 3 (the "
                       "bootstrap comes with the user data)",
        "schemaVersion": 1.0,
        "phases": [
            {"name": "build", "steps": [{
                "name": "SlurmscaleNode", "action": "ExecuteBash",
                "inputs": {"commands": [render_script(slurm_version, bootstrap=False)]}}]},
            {"name": "validate", "steps": [{
                "name": "SlurmdAndBootstrap", "action": "ExecuteBash",
                "inputs": {"commands": [
                    "slurmd -V",
                    "python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))'",
                    "! systemctl is-enabled slurmd.service 2>/dev/null | grep -qx enabled"]}}]},
        ],
    }
    return dump_yaml(doc)
