# shellcheck shell=bash
# Sourced by scripts/main.sh and scripts/test.sh:
#   * creates .venv in the repository root (python3 -m venv) if missing,
#   * installs the project with its test extra (uv where it can follow pip's configuration, pip
#     otherwise: machinery/package_install.py) when pyproject.toml changed since the last
#     successful install (hash kept in .venv/.brokerconf-install-stamp),
#     first making sure a C compiler and the Python headers are there for the analysis's
#     C scanner (as root on Debian: gcc, python3-dev),
#   * as root on Debian, installs the Debian packages the real-broker targets need
#     (set BROKERCONF_INSTALL_BROKERS=0 to skip), iproute2 for the netns nemesis, and the Docker
#     engine with the project's images (set BROKERCONF_INSTALL_DOCKER=0 to skip),
#   * fetches the pinned Apache Artemis distribution and ActiveMQ's AMQP transport with Maven
#     into .tools/ (no root; verified once against pins.toml, then re-used: quick when cached),
#   * fetches the pinned real Java clients with Maven and builds drivers/java against each into
#     .tools/java-clients (no root; set BROKERCONF_INSTALL_JAVA_CLIENTS=0 to skip),
#   * builds the pinned real toxiproxy-server into .tools/bin with Go, when Go is there
#     (no root; set BROKERCONF_INSTALL_TOXIPROXY=0 to skip).
# Leaves the current directory at the repository root.
set -euo pipefail

# Python's bytecode caches on, whatever the calling environment says: with PYTHONDONTWRITEBYTECODE
# set, every Python process compiles the project's modules again and pytest rewrites the asserts of
# every module of the project's plugin again (it caches them only as bytecode). Measured: collecting
# the whole test tree took 20.6 s of CPU without the caches and 7.8 s with them (`time .venv/bin/python
# -m pytest --collect-only -q`, twice), and a test run starts a few hundred Python processes (its
# workers, pytest runs of whole suites, CLI runs, reference brokers).
unset PYTHONDONTWRITEBYTECODE

BROKERCONF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$BROKERCONF_ROOT"

BROKERCONF_PYTHON="${BROKERCONF_PYTHON:-python3}"
BROKERCONF_DEBIAN_BROKER_PACKAGES=(activemq libmqtt-client-java libhawtdispatch-java postgresql
    libpostgresql-jdbc-java libcommons-dbcp2-java libactivemq-activeio-java)
# The brokers only the benchmarks compare against (brokerconf bench mqtt/amqp) and their tests; the
# main job's targets are the reference broker, ActiveMQ and Artemis, so scripts/main.sh leaves these
# out (BROKERCONF_INSTALL_BENCH_BROKERS=0): Erlang's packages are the bulk of apt's work there.
BROKERCONF_DEBIAN_BENCH_BROKER_PACKAGES=(mosquitto rabbitmq-server)
if [ "${BROKERCONF_INSTALL_BENCH_BROKERS:-1}" != "0" ]; then
    BROKERCONF_DEBIAN_BROKER_PACKAGES+=("${BROKERCONF_DEBIAN_BENCH_BROKER_PACKAGES[@]}")
fi

# each line says when, since the set-up began (bash's SECONDS), so a slow step shows in the log
_bc_log() { printf 'brokerconf: [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

_bc_is_root() { [ "$(id -u)" = "0" ]; }

_bc_have_apt() { command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; }

# apt-get install with noninteractive settings; runs apt-get update (once) only
# when the first attempt fails, e.g. because the package lists are missing.
_bc_apt_install() {
    local -a cmd=(apt-get install -y --no-install-recommends "$@")
    if DEBIAN_FRONTEND=noninteractive "${cmd[@]}"; then
        return 0
    fi
    _bc_log "apt-get install failed; running apt-get update and retrying..."
    DEBIAN_FRONTEND=noninteractive apt-get update
    DEBIAN_FRONTEND=noninteractive "${cmd[@]}"
}

# The broker packages' postinst scripts start system services (mosquitto on 1883; rabbitmq-server
# on 5672/25672 with epmd on 4369) that brokerconf never uses: its launchers run private instances
# on free loopback ports.  Without systemd, rabbitmq-server's `invoke-rc.d rabbitmq-server start
# || exit 1` can even fail the install.  While installing them, a temporary policy-rc.d (exit 101:
# "action forbidden") keeps invoke-rc.d and deb-systemd-invoke from starting anything; an existing
# policy-rc.d (e.g. Docker's) is left as it is.  The units stay enabled for the next boot.
_bc_apt_install_no_services() {
    local policy=/usr/sbin/policy-rc.d
    if [ -e "$policy" ]; then
        _bc_apt_install "$@"
        return
    fi
    (
        trap 'rm -f "$policy"' EXIT
        printf '#!/bin/sh\n# temporary, from brokerconf scripts/bootstrap.sh: start no services\nexit 101\n' > "$policy"
        chmod 755 "$policy"
        _bc_apt_install "$@"
    )
}

_bc_dpkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

_bc_hash() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        "$BROKERCONF_PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
    fi
}

# --------------------------------------------------------------------------- python
_bc_ensure_python() {
    if command -v "$BROKERCONF_PYTHON" >/dev/null 2>&1; then
        return 0
    fi
    if _bc_is_root && _bc_have_apt; then
        _bc_log "installing python3 (Debian package python3)..."
        _bc_apt_install python3
    else
        _bc_log "error: $BROKERCONF_PYTHON not found; install Python 3.11+ (Debian: sudo apt-get install python3 python3-venv)"
        exit 1
    fi
}

_bc_ensure_venv_module() {
    # Debian splits venv/ensurepip into python3-venv; without it `python3 -m venv` fails.
    if "$BROKERCONF_PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        return 0
    fi
    if _bc_is_root && _bc_have_apt; then
        _bc_log "installing python3-venv (Python's venv module is missing)..."
        _bc_apt_install python3-venv
    else
        _bc_log "error: Python's venv module is missing; install the Debian package python3-venv" \
                "(sudo apt-get install python3-venv) and rerun"
        exit 1
    fi
}

_bc_ensure_venv() {
    # A completed install leaves the stamp; without it, make sure pip is usable
    # (a venv created without ensurepip has no pip and must be recreated).
    if [ -x .venv/bin/python ] && .venv/bin/python -c '' >/dev/null 2>&1; then
        if [ -f .venv/.brokerconf-install-stamp ] || .venv/bin/python -m pip --version >/dev/null 2>&1; then
            return 0
        fi
    fi
    _bc_ensure_python
    _bc_ensure_venv_module
    if [ -e .venv ]; then
        _bc_log "recreating broken virtualenv in .venv..."
        "$BROKERCONF_PYTHON" -m venv --clear .venv
    else
        _bc_log "creating virtualenv in .venv..."
        "$BROKERCONF_PYTHON" -m venv .venv
    fi
    rm -f .venv/.brokerconf-install-stamp
}

_bc_ensure_compiler() {
    # Two builds of pip's need more than Python: the analysis's C line scanner
    # (reports/pipeline/fused/_scan.c) a C compiler and the Python headers (without them pyarrow
    # parses instead, slower; the scanner's tests then fail, saying so); python-qpid-proton, which
    # has no wheel for CPython 3.11, OpenSSL's headers found through pkg-config: without them pip
    # builds it without TLS, and every amqps connection fails with "SSL failure." (found on a fresh
    # Debian 12 by benchmarks/fresh_machine.sh; `_bc_check_amqp_tls` below catches a build made so).
    local include
    include="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    if command -v cc >/dev/null 2>&1 && [ -f "$include/Python.h" ] && command -v pkg-config >/dev/null 2>&1 \
            && pkg-config --exists openssl 2>/dev/null; then
        return 0
    fi
    if _bc_is_root && _bc_have_apt; then
        _bc_log "installing a C compiler, the Python and OpenSSL headers (gcc, python3-dev, libssl-dev," \
                "pkg-config) for the analysis's scanner and the AMQP client's TLS..."
        _bc_apt_install gcc libc6-dev python3-dev libssl-dev pkg-config || \
            _bc_log "warning: could not install gcc/python3-dev/libssl-dev; the C scanner or AMQP over TLS may be missing"
    else
        _bc_log "warning: no C compiler, Python headers ($include/Python.h) or OpenSSL headers: the analysis's" \
                "C scanner or the AMQP client's TLS will not be built (Debian: sudo apt-get install gcc python3-dev" \
                "libssl-dev pkg-config)"
    fi
}

# A python-qpid-proton built without OpenSSL (headers missing when pip built it, or a wheel of such a
# build in pip's cache) fails every amqps connection. Rebuilt once from source, without the cache,
# when the headers are there now; otherwise the reason is said, and the TLS tests fail saying it too.
_bc_check_amqp_tls() {
    local has_tls='import proton, sys; sys.exit(0 if proton.SSL.present() else 1)'
    .venv/bin/python -c "$has_tls" 2>/dev/null && return 0
    if ! pkg-config --exists openssl 2>/dev/null; then
        _bc_log "warning: python-qpid-proton was built without TLS and OpenSSL's headers are missing" \
                "(Debian: apt-get install libssl-dev pkg-config, then rerun): AMQP over TLS will fail"
        return 0
    fi
    _bc_log "python-qpid-proton was built without TLS; rebuilding it against OpenSSL..."
    local version
    version="$(.venv/bin/python -c 'from importlib.metadata import version; print(version("python-qpid-proton"))')"
    .venv/bin/python -m pip install --disable-pip-version-check --no-input -q --no-cache-dir --force-reinstall \
        --no-deps "python-qpid-proton==$version" || true
    .venv/bin/python -c "$has_tls" 2>/dev/null || _bc_log "warning: python-qpid-proton still has no TLS: AMQP over TLS will fail"
}

_bc_packages_stamp() {
    # the root path is part of the stamp: a moved checkout needs its entry points rewritten; the
    # C scanner's source too, since an editable install compiles it once (reports/pipeline/fused/_scan.c)
    echo "$(_bc_hash pyproject.toml) $(_bc_hash reports/pipeline/fused/_scan.c) $BROKERCONF_ROOT"
}

_bc_packages_current() {
    [ -f .venv/.brokerconf-install-stamp ] && [ "$(cat .venv/.brokerconf-install-stamp)" = "$(_bc_packages_stamp)" ]
}

_bc_install_packages() {
    # uv where it can follow pip's configuration, pip otherwise (machinery/package_install.py)
    _bc_log "installing Python packages (-e '.[test]')..."
    .venv/bin/python -m machinery.package_install -e '.[test]'
    _bc_packages_stamp > .venv/.brokerconf-install-stamp
    _bc_log "Python packages installed"
}

# --------------------------------------------------------------------------- brokers
_bc_ensure_brokers() {
    _bc_have_apt || return 0   # not Debian: the launcher reports ActiveMQ as unavailable
    local -a missing=()
    local p
    for p in "${BROKERCONF_DEBIAN_BROKER_PACKAGES[@]}"; do
        _bc_dpkg_installed "$p" || missing+=("$p")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if _bc_is_root && [ "${BROKERCONF_INSTALL_BROKERS:-1}" != "0" ]; then
        _bc_log "installing Debian packages for real-broker targets: ${missing[*]}..."
        if ! _bc_apt_install_no_services "${missing[@]}"; then
            # Not fatal: the reference broker needs none of this. Real-broker checks report
            # the broker as not installed (with that reason) instead of running.
            _bc_log "warning: could not install ${missing[*]}; real-broker comparisons will be" \
                    "reported as not applicable (fix apt, or set BROKERCONF_INSTALL_BROKERS=0 to silence this)"
        fi
    else
        _bc_log "note: real-broker comparisons will be skipped; install ${missing[*]} to enable them" \
                "(sudo apt-get install ${missing[*]})"
    fi
}

# --------------------------------------------------------------------------- FUSE
# The shared store's per-host mounts (machinery/sharedstore, issue 18: NFS lock loss simulated in user
# space) are FUSE file systems: libfuse 3 and fusermount3 come from Debian's fuse3 (the Python side,
# mfusepy, loads libfuse3 through ctypes, so no -dev package is needed). Not fatal: without it the
# shared-store mount tests are skipped (failed where BROKERCONF_REQUIRE names fuse).
BROKERCONF_DEBIAN_FUSE_PACKAGES=(fuse3)
_bc_ensure_fuse() {
    _bc_have_apt || return 0
    command -v fusermount3 >/dev/null 2>&1 && return 0
    if _bc_is_root; then
        _bc_log "installing ${BROKERCONF_DEBIAN_FUSE_PACKAGES[*]} (the shared store's FUSE mounts)..."
        _bc_apt_install "${BROKERCONF_DEBIAN_FUSE_PACKAGES[@]}" || \
            _bc_log "warning: could not install fuse3; the shared-store mount tests will be skipped"
    else
        _bc_log "note: the shared-store mount tests will be skipped: they need fuse3 (sudo apt-get install fuse3)"
    fi
}

# --------------------------------------------------------------------------- Artemis
# The `artemis:process` target (issue 16): the binary distribution pinned in
# machinery/pins.toml, copied by Maven (which reads the machine's own mirror settings),
# verified against the pinned sha512 and unpacked under .tools/artemis. Needs no root, so
# BROKERCONF_INSTALL_BROKERS=0 does not skip it (that flag is about apt). Not fatal: without it the
# Artemis target is reported not applicable with the reason. Runs before the image build, which
# can use the same archive.
_bc_ensure_artemis() {
    if ! command -v mvn >/dev/null 2>&1; then
        if _bc_is_root && _bc_have_apt && [ "${BROKERCONF_INSTALL_BROKERS:-1}" != "0" ]; then
            _bc_log "installing maven (Debian package) to fetch the Artemis distribution..."
            _bc_apt_install maven || true
        fi
    fi
    if ! .venv/bin/python -m conformance.targets.artemis.dist >/dev/null; then
        _bc_log "warning: the Artemis target will be reported not applicable (see the message above;" \
                "retry with: .venv/bin/brokerconf targets install artemis)"
    fi
}

# The class archive every Artemis launch maps (conformance/targets/runtime/class_archive.py): one
# broker launch, once per JDK and distribution; without it launches only start more slowly. After
# pip (the launcher needs the project's packages). Without a verified distribution the module says
# so and makes nothing (it checks, it does not fetch again: the fetch already warned).
_bc_ensure_artemis_class_archive() {
    .venv/bin/python -m conformance.targets.artemis.class_archive >/dev/null || true
}

# --------------------------------------------------------------------------- network namespaces
# The netns nemesis (chaos/nemesis/netns.py) partitions two network namespaces with the `ip` tool
# of iproute2 (and needs root to do it); CI requires it (.ci/run, BROKERCONF_REQUIRE=...,netns).
_bc_ensure_netns() {
    _bc_have_apt || return 0
    command -v ip >/dev/null 2>&1 && return 0
    if _bc_is_root; then
        _bc_log "installing iproute2 (the netns nemesis's 'ip' tool)..."
        _bc_apt_install iproute2 || _bc_log "warning: could not install iproute2; the netns nemesis tests will be skipped"
    else
        _bc_log "note: the netns nemesis tests will be skipped: they need root and iproute2 (sudo apt-get install iproute2)"
    fi
}

# --------------------------------------------------------------------------- ActiveMQ's AMQP transport
# Debian packages ActiveMQ Classic without its AMQP transport: fetch the pinned jars
# (machinery/pins.toml [activemq-amqp]) into .tools/ with Maven, which reads the
# machine's own mirror settings. Quick when they are there (the module only verifies digests).
# Not fatal: without them the AMQP cases are reported not applicable on ActiveMQ, with the reason.
# BROKERCONF_INSTALL_AMQP=0 skips it.
_bc_ensure_activemq_amqp() {
    [ "${BROKERCONF_INSTALL_AMQP:-1}" != "0" ] || return 0
    [ -f "${BROKERCONF_ACTIVEMQ_HOME:-/usr/share/activemq}/bin/activemq.jar" ] || return 0
    if ! command -v mvn >/dev/null 2>&1; then
        _bc_log "note: ActiveMQ's AMQP cases will be skipped; install maven to fetch its AMQP transport"
        return 0
    fi
    if ! .venv/bin/python -m conformance.targets.activemq.amqp >/dev/null; then
        _bc_log "warning: could not fetch ActiveMQ's AMQP transport (reason above); its AMQP cases will be" \
                "reported not applicable (retry: brokerconf targets install activemq-amqp)"
    fi
}

# The class archive every local ActiveMQ launch maps (conformance/targets/runtime/class_archive.py,
# activemq/class_path.py): one broker launch, once per JDK and set of installed jars, after the AMQP
# transport so the launch loads its connector too; without it launches only start more slowly.
_bc_ensure_activemq_class_archive() {
    [ -f "${BROKERCONF_ACTIVEMQ_HOME:-/usr/share/activemq}/bin/activemq.jar" ] || return 0
    .venv/bin/python -m conformance.targets.activemq.class_archive >/dev/null || true
}

# --------------------------------------------------------------------------- real Java clients
# The client-side chapters checked on the real client libraries (issue 28): the clients pinned in
# machinery/pins.toml [java-clients.*] fetched with Maven (which reads the machine's own
# mirror settings) and brokerconf's driver (drivers/java) compiled against each, into
# .tools/java-clients/ (no root; quick when built: digests and a source stamp are checked). Not
# fatal: without them those tests are skipped (failed where BROKERCONF_REQUIRE names java-clients).
_bc_ensure_java_clients() {
    [ "${BROKERCONF_INSTALL_JAVA_CLIENTS:-1}" != "0" ] || return 0
    if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        _bc_log "note: the real Java client tests will be skipped; they need a JDK 17 (javac) and maven"
        return 0
    fi
    if ! .venv/bin/python -m conformance.clients.java_build >/dev/null; then
        _bc_log "warning: building the Java client driver failed (reason above); its tests will be skipped" \
                "(retry: .venv/bin/python -m conformance.clients.java_build)"
    fi
}

# --------------------------------------------------------------------------- containers
# The container targets (issue 8): as root on Debian, install the engine, start it when no service
# manager does, and build the local images (docker/README.md: offline base image when no registry
# answers). Idempotent and quick once done. Not fatal: without Docker the container targets and
# tests are reported not applicable with the reason (machinery/docker_env.py).
_bc_ensure_docker() {
    _bc_have_apt || return 0
    [ "${BROKERCONF_INSTALL_DOCKER:-1}" != "0" ] || return 0
    if ! _bc_is_root; then
        command -v dockerd >/dev/null 2>&1 || \
            _bc_log "note: container targets will be skipped; install docker.io and debootstrap to enable them"
        return 0
    fi
    local -a missing=()
    local p
    for p in docker.io debootstrap; do
        _bc_dpkg_installed "$p" || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        _bc_log "installing Debian packages for container targets: ${missing[*]}..."
        if ! _bc_apt_install_no_services "${missing[@]}"; then
            _bc_log "warning: could not install ${missing[*]}; container targets will be reported not applicable"
            return 0
        fi
    fi
    if ! docker/start-engine.sh; then
        _bc_log "warning: the Docker engine did not start; container targets will be reported not applicable"
        return 0
    fi
    if ! docker/build-images.sh; then
        _bc_log "warning: building the broker images failed; container targets will be reported not applicable"
    fi
}

# --------------------------------------------------------------------------- toxiproxy
# The real Toxiproxy server (issue 16): `go install` of the version pinned in
# machinery/pins.toml into .tools/bin/toxiproxy-server (machinery/faultproxy/install.py); re-used
# when its -version names the pin, so this is quick once done. Not fatal: without it the proxy tests
# run against our proxy only and report the real server's runs as skipped (failed where CI requires
# toxiproxy), and start_fault_proxy() falls back to ours.
_bc_ensure_toxiproxy() {
    [ "${BROKERCONF_INSTALL_TOXIPROXY:-1}" != "0" ] || return 0
    if [ -x .tools/bin/toxiproxy-server ] && ! command -v go >/dev/null 2>&1; then
        return 0   # built before; nothing here could rebuild it anyway
    fi
    if ! command -v go >/dev/null 2>&1; then
        _bc_log "note: the real toxiproxy-server is not installed and \`go\` is not on PATH; the proxy tests" \
                "run against brokerconf's own proxy only (install Go 1.23+, then: brokerconf targets install toxiproxy)"
        return 0
    fi
    # (-c, not -m: the package imports the module, and runpy would warn about running it twice)
    if ! .venv/bin/python -c 'import sys; from machinery.faultproxy.install import main; sys.exit(main())'; then
        _bc_log "warning: building toxiproxy-server failed (output above); the proxy tests run against" \
                "brokerconf's own proxy only"
    fi
}

# The steps wait on downloads as much as they compute, and on a fresh machine of 2 cores they need
# about 4 min of CPU between them (README, "Time"), so steps run side by side where one would
# otherwise leave the machine idle, not more:
# - the packages (no root) beside apt's packages (root; one apt at a time: it locks its database).
#   The C compiler check comes first, since it may itself need apt;
# - once apt is done, the Maven fetches (one after the other: they share ~/.m2; the AMQP jars need
#   the ActiveMQ package) and the Go build, beside the packages: their modules need only Python's
#   standard library, so the venv's interpreter runs them before the packages are in
#   (tests/test_setup_imports.py keeps them so). Started at once instead, beside apt, they slowed
#   apt and the packages by as much as they gained: 136-170 s for the set-up in four runs, against
#   144 s (benchmarks/fresh_machine.sh --setup-only);
# - each broker's class archive (a launch of it, with the project's packages) once the packages and
#   its fetch are done, one after the other (the one fresh main job whose archives were made side by
#   side spent 55 % more CPU in the brokers than the runs before it, for no reason found; ~5 s is not
#   worth that doubt); the images last: the Toxiproxy image is built from the Go build's binary.
# A failed package install fails the set-up; the other steps are not fatal (each says what will not run).
_bc_ensure_venv
_bc_pip_pid=""
if ! _bc_packages_current; then
    _bc_ensure_compiler
    _bc_install_packages &
    _bc_pip_pid=$!
fi
_bc_ensure_brokers
_bc_ensure_netns
_bc_ensure_fuse
( _bc_ensure_artemis; _bc_ensure_activemq_amqp; _bc_ensure_java_clients ) &
_bc_maven_pid=$!
_bc_ensure_toxiproxy
if [ -n "$_bc_pip_pid" ] && ! wait "$_bc_pip_pid"; then
    wait "$_bc_maven_pid" || true  # nothing of the set-up is left running behind the error
    _bc_log "error: installing the Python packages (-e '.[test]') failed (output above)"
    exit 1
fi
wait "$_bc_maven_pid" || _bc_log "warning: fetching with Maven failed (output above)"
_bc_check_amqp_tls
_bc_ensure_artemis_class_archive
_bc_ensure_activemq_class_archive
_bc_ensure_docker
