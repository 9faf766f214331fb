#!/usr/bin/env bash
# Installs the container engine and gVisor from Debian's packages, registers runsc
# with the engine, and (re)starts dockerd. Idempotent; run as root.
#
# runsc runs with --network=none (sandboxes have no network anyway), with
# --host-uds=open so a granted run can dial the one host socket plimsoll mounts into
# it (its broker; nothing else from the host is mounted), and with the ptrace
# platform, which works everywhere, nested virtual machines included; set
# PLIMSOLL_RUNSC_PLATFORM=systrap (or kvm) where that platform works.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
platform=${PLIMSOLL_RUNSC_PLATFORM:-ptrace}

if ! command -v dockerd >/dev/null || ! command -v runsc >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends docker.io runsc debootstrap
fi

mkdir -p /etc/docker
want=$(cat <<JSON
{
  "runtimes": {
    "runsc": { "path": "$(command -v runsc)", "runtimeArgs": ["--network=none", "--host-uds=open", "--platform=$platform"] }
  }
}
JSON
)
restart=0
if [ ! -f /etc/docker/daemon.json ] || [ "$(cat /etc/docker/daemon.json)" != "$want" ]; then
  [ -f /etc/docker/daemon.json ] && cp /etc/docker/daemon.json "/etc/docker/daemon.json.before-plimsoll"
  printf '%s\n' "$want" > /etc/docker/daemon.json
  restart=1
fi

running() { docker info >/dev/null 2>&1; }
if running && [ "$restart" = 1 ]; then
  if command -v systemctl >/dev/null && systemctl is-active -q docker 2>/dev/null; then
    systemctl restart docker
  else
    pkill -x dockerd || true
    # Wait for the process itself to exit: it removes its pid file last.
    for _ in $(seq 150); do pgrep -x dockerd >/dev/null || break; sleep 0.2; done
  fi
fi
if ! running; then
  if command -v systemctl >/dev/null && systemctl is-system-running -q 2>/dev/null; then
    systemctl start docker
  else
    setsid dockerd >/var/log/dockerd.log 2>&1 < /dev/null &
  fi
  for _ in $(seq 150); do running && break; sleep 0.2; done
fi
running || { echo "install-runtimes.sh: dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' | grep -qw runsc || {
  echo "install-runtimes.sh: docker does not list runsc after the restart" >&2; exit 1; }
echo "docker $(docker version --format '{{.Server.Version}}') with runtimes: $(docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}')" >&2
