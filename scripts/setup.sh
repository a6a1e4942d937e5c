#!/usr/bin/env bash
# Idempotent set-up for a Debian 12 machine, run as root:
#   1. apt packages (Open vSwitch, Mininet, iperf3, ping, ethtool, venv, Prometheus for the
#      metrics' integration test; no package's service is started),
#   2. .venv on Python 3.11 with requirements.txt, installed by uv (Ryu 4.34 needs old build
#      tools: docs/install.md),
#   3. the project itself into .venv, editable, so that .venv/bin/hpo-* run this checkout's code,
#   4. the simulator's and the controller's numba kernels compiled into their on-disk cache (once:
#      about a minute), so that the first run or reorder after set-up does not compile them,
#   5. Open vSwitch started on the userspace datapath (scripts/ovs.sh start).
# A second run finds everything in place and finishes in seconds.
# Environment: PYTHON (default python3.11), VENV (default .venv), SKIP_OVS=1 to not start OVS.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

apt_packages=(openvswitch-switch openvswitch-common mininet iperf3 iputils-ping ethtool
              iproute2 python3-venv prometheus)
# Debian's hook that may refuse a package's service action (exit 101): while setup.sh installs
# packages, one that refuses Prometheus' (the tests start their own, on loopback; the package's
# daemon would listen on every address) and allows the rest, as no hook does
POLICY_RC=/usr/sbin/policy-rc.d
POLICY_RC_MARK="# scripts/setup.sh: no Prometheus daemon on install"

install_apt() {
    local missing=()
    for pkg in "${apt_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "apt packages present"
        return
    fi
    [ "$(id -u)" -eq 0 ] || die "apt packages missing (${missing[*]}); run as root"
    say "installing apt packages: ${missing[*]}"
    apt-get update -qq
    # Where the machine has a hook of its own (a container's refuses every start), it decides.
    local own_hook=0
    if [ ! -e "$POLICY_RC" ]; then
        own_hook=1
        trap 'rm -f "$POLICY_RC"' EXIT
        cat > "$POLICY_RC" <<HOOK
#!/bin/sh
$POLICY_RC_MARK
while [ "\${1#--}" != "\$1" ]; do shift; done
[ "\$1" = prometheus ] && exit 101
exit 0
HOOK
        chmod 755 "$POLICY_RC"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    if [ "$own_hook" = 1 ]; then
        rm -f "$POLICY_RC"
        trap - EXIT
    fi
}

pip_install() {
    "$VENV/bin/python" -m pip --disable-pip-version-check -q install "$@"
}

# uv first; pip where uv cannot (uv does not read pip's configuration: an index or a proxy
# that only pip.conf names)
install_with() {
    if [ -x "$VENV/bin/uv" ]; then
        # --compile-bytecode: as pip does (without it every import here was ~3x slower)
        "$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$VENV/bin/python" "$@" \
            && return
        say "uv could not install that; pip installs it instead"
    fi
    pip_install "$@"
}

install_venv() {
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=/path/to/python3.11)"
    local stamp="$VENV/.requirements.sha256"
    local want
    want=$(sha256sum requirements.txt | cut -d' ' -f1)
    if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        say "$VENV up to date"
        return
    fi
    [ -x "$VENV/bin/python" ] || { say "creating $VENV with $PYTHON"; "$PYTHON" -m venv "$VENV"; }
    # uv (pinned in requirements.txt) downloads and installs in parallel: the same packages
    # as pip, several times faster on a fresh machine. Where pip finds no uv, pip does it all.
    pip_install "$(grep '^uv==' requirements.txt)" || say "no uv; pip installs everything"
    # Ryu 4.34's setup.py needs old setuptools and pbr, without build isolation.
    install_with "$(grep '^setuptools==' requirements.txt)" \
        "$(grep '^wheel==' requirements.txt)" "$(grep '^pbr==' requirements.txt)"
    say "installing requirements.txt into $VENV"
    install_with --no-build-isolation -r requirements.txt
    echo "$want" > "$stamp"
}

install_project() {
    # Editable: the console scripts import this checkout's code, so a pull needs no reinstall;
    # only a changed pyproject.toml (new scripts, packages) or another checkout does.
    local stamp="$VENV/.project.sha256"
    local want
    want="$(sha256sum pyproject.toml | cut -d' ' -f1) $(pwd -P)"
    if [ -x "$VENV/bin/hpo-testbed" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        say "project installed in $VENV"
        return
    fi
    say "installing the project into $VENV (editable: $VENV/bin/hpo-*)"
    # The requirements are in place already; the pinned setuptools 65.5 and wheel of .venv
    # build the editable wheel (PEP 660), so no build backend is fetched.
    install_with --no-deps --no-build-isolation -e .
    echo "$want" > "$stamp"
}

warm_kernels() {
    # Loads them from the cache when it is current (a second or two), compiles them otherwise.
    "$VENV/bin/python" -c 'from simulator.engine import warm_up; warm_up()'
    say "simulator and controller kernels ready"
}

main() {
    install_apt
    install_venv
    install_project
    warm_kernels
    if [ "${SKIP_OVS:-0}" != 1 ]; then
        bash scripts/ovs.sh start
    fi
    say "done"
}

# sourced (the tests do, for its functions), it defines them and runs nothing
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main
fi
