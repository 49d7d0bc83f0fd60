#!/usr/bin/env bash
# System setup for agentrl sandboxes (idempotent; needs root).
#   - installs bubblewrap and libseccomp2 (local backend) and docker.io (docker backend)
#   - starts dockerd in the background when no engine answers, waiting up to DOCKER_WAIT s
#   - builds the tiny local base image (no registry): an empty rootfs tarball of mount points,
#     `docker import`ed; the host /usr and Python prefix are bind-mounted read-only at run time.
# Docker trouble never fails the script: the docker tests then skip with the reason.
# Usage: sudo scripts/setup-sandbox.sh    (env: AGENTRL_SANDBOX_IMAGE, DOCKER_WAIT, SKIP_DOCKER=1)
set -uo pipefail

IMAGE="${AGENTRL_SANDBOX_IMAGE:-agentrl-sandbox:base}"
DOCKER_WAIT="${DOCKER_WAIT:-30}"
log() { echo "[setup-sandbox] $*"; }

if [ "$(id -u)" -ne 0 ]; then
  log "must run as root (bubblewrap is used as root; dockerd needs root)"; exit 1
fi

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# libseccomp compiles the sandbox's syscall filter (sandboxes/_seccomp.py).
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || missing+=(libseccomp2)
if [ "${SKIP_DOCKER:-0}" != 1 ]; then
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null \
    || log "apt-get failed for ${missing[*]}"
fi
command -v bwrap >/dev/null 2>&1 || { log "bubblewrap missing: local backend unavailable"; exit 1; }
log "bubblewrap $(bwrap --version | awk '{print $2}') ok"

[ "${SKIP_DOCKER:-0}" = 1 ] && { log "SKIP_DOCKER=1: done"; exit 0; }
if ! command -v dockerd >/dev/null 2>&1; then
  log "docker.io not installed: docker backend unavailable (tests will skip)"; exit 0
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /tmp/dockerd.log)"
  nohup dockerd >/tmp/dockerd.log 2>&1 &
  for _ in $(seq "$DOCKER_WAIT"); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
fi
if ! docker info >/dev/null 2>&1; then
  log "docker engine did not come up in ${DOCKER_WAIT}s (see /tmp/dockerd.log); docker tests will skip"
  exit 0
fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "image $IMAGE already present"; exit 0
fi
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{usr,etc,tmp,work,proc,dev,sys}
chmod 1777 "$root/tmp" "$root/work"  # docker keeps the image dir mode for tmpfs mounts
for d in bin lib lib64 sbin; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"; elif [ -d "/$d" ]; then mkdir "$root/$d"; fi
done
printf 'sandbox:x:65534:65534::/work:/bin/sh\n' >"$root/etc/passwd"
printf 'sandbox:x:65534:\n' >"$root/etc/group"
if tar -C "$root" -c . | docker import -c 'WORKDIR /work' - "$IMAGE" >/dev/null; then
  log "built $IMAGE"
else
  log "docker import failed; docker tests will skip"
fi
exit 0
