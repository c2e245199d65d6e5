#!/usr/bin/env bash
# Start the Docker engine when nothing else does (no systemd/service manager, e.g. CI containers
# or VMs without an init system).  Idempotent: does nothing when `docker info` already works.
#
#   docker/start-engine.sh            start dockerd if needed and wait until it answers
#
# dockerd runs in the background (its own session, so it outlives this script); its log goes to
# $BROKERCONF_DOCKERD_LOG (default /var/log/brokerconf-dockerd.log) and its PID to
# $BROKERCONF_DOCKERD_PIDFILE (default /run/brokerconf-dockerd.pid), so it can be stopped later by
# that PID: `kill "$(cat /run/brokerconf-dockerd.pid)"`.
set -euo pipefail

LOG="${BROKERCONF_DOCKERD_LOG:-/var/log/brokerconf-dockerd.log}"
PIDFILE="${BROKERCONF_DOCKERD_PIDFILE:-/run/brokerconf-dockerd.pid}"
WAIT_SECONDS="${BROKERCONF_DOCKERD_WAIT:-60}"

say() { echo "start-engine: $*" >&2; }

if docker info >/dev/null 2>&1; then
    say "Docker engine already running; nothing to do"
    exit 0
fi
if ! command -v docker >/dev/null 2>&1; then
    say "error: no docker CLI on PATH; install the engine with \`apt-get install docker.io\` (as root)"
    exit 1
fi
if ! command -v dockerd >/dev/null 2>&1; then
    say "error: \`docker info\` fails and there is no dockerd to start; install the engine with" \
        "\`apt-get install docker.io\` (as root), or point DOCKER_HOST at a running engine"
    exit 1
fi
if [ "$(id -u)" != "0" ]; then
    say "error: \`docker info\` fails and starting dockerd needs root; run \`sudo $0\`," \
        "or add yourself to the docker group if the engine is running but the socket is not yours"
    exit 1
fi
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    say "dockerd (pid $(cat "$PIDFILE")) is already starting; waiting for it"
else
    # A service manager that knows the engine is the better owner of it.
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        say "systemd is running: starting docker.service"
        systemctl start docker.service
    else
        say "no service manager runs the engine: starting dockerd in the background (log: $LOG)"
        mkdir -p "$(dirname "$LOG")"
        # setsid: own session, so the engine is not killed with this shell's process group.
        setsid dockerd >>"$LOG" 2>&1 < /dev/null &
        echo $! > "$PIDFILE"
        say "dockerd started with pid $(cat "$PIDFILE") (pid file $PIDFILE)"
    fi
fi

for _ in $(seq 1 "$((WAIT_SECONDS * 2))"); do
    if docker info >/dev/null 2>&1; then
        say "Docker engine is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
        exit 0
    fi
    if [ -f "$PIDFILE" ] && ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        say "error: dockerd exited during startup; last lines of $LOG:"
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
    sleep 0.5
done
say "error: the Docker engine did not answer within ${WAIT_SECONDS}s; last lines of $LOG:"
tail -n 20 "$LOG" >&2 || true
exit 1
