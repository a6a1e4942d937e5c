#!/usr/bin/env bash
# Start, stop or query Open vSwitch on the userspace datapath (no kernel module here).
#   scripts/ovs.sh start|stop|status
# start is a no-op when ovs-vswitchd already answers; stop uses ovs-ctl, which stops the
# daemons by their pid files (never by name).
set -euo pipefail
ovs_ctl=/usr/share/openvswitch/scripts/ovs-ctl

running() { ovs-vsctl --timeout=2 show >/dev/null 2>&1 && ovs-appctl -t ovs-vswitchd version >/dev/null 2>&1; }

case "${1:-}" in
start)
    if running; then
        echo "[ovs] already running"
        exit 0
    fi
    [ -x "$ovs_ctl" ] || { echo "[ovs] error: $ovs_ctl missing; run scripts/setup.sh" >&2; exit 1; }
    # ovs-ctl skips the absent kernel module; its ulimit complaint is harmless.
    "$ovs_ctl" start --system-id=random --no-monitor >/tmp/ovs-ctl-start.log 2>&1 || true
    for _ in $(seq 50); do running && break; sleep 0.1; done
    running || { echo "[ovs] error: OVS did not start, see /tmp/ovs-ctl-start.log" >&2; exit 1; }
    echo "[ovs] started ($(ovs-vswitchd --version | head -1))"
    ;;
stop)
    running || { echo "[ovs] not running"; exit 0; }
    "$ovs_ctl" stop >/dev/null
    echo "[ovs] stopped"
    ;;
status)
    if running; then echo "[ovs] running"; else echo "[ovs] not running"; exit 3; fi
    ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
