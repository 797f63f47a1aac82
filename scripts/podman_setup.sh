#!/usr/bin/env bash
# Lets podman build and run the mesh image on the project's machines (Debian VMs with a hybrid
# cgroup layout, no container registry, pip going through a TLS-intercepting proxy), for
# tests/e2e/test_image.py. Run as root; idempotent. Prints the two variables the test reads.
#   eval "$(bash scripts/podman_setup.sh)" && .venv/bin/pytest tests/e2e/test_image.py
set -euo pipefail
base=localhost/mesh-base:bookworm

# podman asks for ulimits above the hard limits a process may set here: ask for the hard limits.
# Soft equal to hard: a pod's infra container (`podman kube play`) gets the pair swapped.
mkdir -p /etc/containers/containers.conf.d
cat > /etc/containers/containers.conf.d/90-mesh-ulimits.conf <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=4096:4096"]
CONF

# crun refuses a hybrid layout whose cgroup v2 hierarchy holds controllers: give each of them
# (hugetlb, here) its own v1 hierarchy. Mounting a controller as v1 takes it off the v2 hierarchy.
# (`[ -s ]` cannot test this file: cgroup files report a size of 0 whatever they hold.)
unified=/sys/fs/cgroup/unified/cgroup.controllers
controllers=$( [ -r "$unified" ] && cat "$unified" || true)
if [ -n "$controllers" ]; then
  for controller in $controllers; do
    mkdir -p "/sys/fs/cgroup/$controller"
    mountpoint -q "/sys/fs/cgroup/$controller" \
      || mount -t cgroup -o "$controller" cgroup "/sys/fs/cgroup/$controller"
  done
fi

# No registry serves python:3.11-slim here: a Debian bookworm base (Python 3.11) from debootstrap.
if ! podman image exists "$base"; then
  root=$(mktemp -d)
  debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian >&2
  rm -rf "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | podman import - "$base" >&2
  rm -rf "$root"
fi

# pip inside the build: the machine's CA bundle (its proxy) and its local wheelhouse (torch's CPU
# build is there; the PyTorch index is not reachable).
options="--build-arg TORCH_INDEX_URL=https://pypi.org/simple"
options+=" --build-arg 'PIP_EXTRA_ARGS=--cert /etc/ssl/certs/ca-certificates.crt --find-links /wheels'"
options+=" -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro"
[ -d /opt/wheels ] && options+=" -v /opt/wheels:/wheels:ro"
echo "export MESH_BASE_IMAGE=$base"
echo "export MESH_IMAGE_BUILD_OPTIONS=\"$options\""
