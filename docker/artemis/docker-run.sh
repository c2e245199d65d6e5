#!/bin/bash
# Entry point of brokerconf/artemis (docker/artemis/Dockerfile): the first time, create a broker
# instance in the working directory (/var/lib/artemis-instance) with `artemis create`, then run
# the instance's `bin/artemis` with the arguments given (`run` by default, `version`, ...), as the
# official image's /docker-run.sh does.
#
# Environment (the official image's names and defaults):
#   ARTEMIS_USER / ARTEMIS_PASSWORD   the instance's user (default artemis / artemis)
#   ANONYMOUS_LOGIN                   true: clients may connect without credentials; false (default)
#                                     requires a login
#   EXTRA_ARGS                        more `artemis create` options, split on whitespace (default
#                                     "--http-host 0.0.0.0 --relax-jolokia": the console, whose
#                                     start logs "HTTP Server started", listens on every interface)
# An existing etc/broker.xml (a restarted container) is kept as it is.
set -euo pipefail

ARTEMIS_HOME=/opt/activemq-artemis
say() { echo "docker-run.sh: $*"; }

case "${ANONYMOUS_LOGIN:-false}" in
    [Tt][Rr][Uu][Ee]) login=--allow-anonymous ;;
    [Ff][Aa][Ll][Ss][Ee]) login=--require-login ;;
    *) say "error: ANONYMOUS_LOGIN must be true or false, not '${ANONYMOUS_LOGIN}'"; exit 2 ;;
esac

if [ $# -eq 0 ]; then
    set -- run
fi

if [ ! -f etc/broker.xml ]; then
    say "creating the broker instance in $(pwd): user ${ARTEMIS_USER:-artemis}, $login, extra: ${EXTRA_ARGS:-}"
    # shellcheck disable=SC2086  # EXTRA_ARGS is a whitespace-separated option list on purpose
    "$ARTEMIS_HOME/bin/artemis" create --user "${ARTEMIS_USER:-artemis}" --password "${ARTEMIS_PASSWORD:-artemis}" \
        --silent "$login" ${EXTRA_ARGS:-} .
else
    say "instance already exists in $(pwd) (etc/broker.xml): not created again"
fi

exec ./bin/artemis "$@"
