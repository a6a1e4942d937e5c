"""Start the controller: ``python -m controller --policy beamer``.

``--policy`` also takes a policy of one's own, ``package.module:Class`` or an installed entry
point's name (:mod:`controller.plugins`); it is loaded at start, as are those of
``--load-policy``, and ``PUT /api/policy`` switches only among them and the built-ins.

OpenFlow listens on 127.0.0.1:6653 and the REST API on 127.0.0.1:8080 unless told otherwise.
``--hosts`` takes a JSON file describing the hosts (a list of objects with ``name``, ``ip`` and
optionally ``mac``, ``switch`` (the datapath id of its edge switch; omitted on a one-switch
network), ``port`` (its port on that switch) and ``bps``); with it, flows may name hosts and
forwarding is installed as soon as the switches and the links between them are known, instead
of learned.

The scheduling core (numba's kernels) is imported once the command line is read, and Ryu when
the controller starts, so that ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from pathlib import Path

from cli.argtypes import (
    POLICY_NAMES,
    non_negative,
    policy_help,
    policy_name,
    positive,
    program,
    tcp_port,
)


def _option(text: str) -> tuple[str, str]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, raw


def load_hosts(path: str):
    """Parse a ``--hosts`` file; raises ``ValueError`` naming the entry and field."""
    from controller.model import HostPort

    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of hosts")
    hosts = []
    for i, entry in enumerate(data):
        where = f"{path}: host [{i}]"
        if not isinstance(entry, dict) or not {"name", "ip"} <= set(entry):
            raise ValueError(f"{where}: needs at least 'name' and 'ip'")
        unknown = set(entry) - {"name", "ip", "mac", "port", "bps", "switch"}
        if unknown:
            raise ValueError(f"{where}: unknown field {sorted(unknown)[0]!r}")
        for key in ("port", "switch"):
            value = entry.get(key)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ValueError(f"{where}: {key} {value!r} is not a non-negative integer")
        try:
            ipaddress.IPv4Address(entry["ip"])
        except ValueError:
            raise ValueError(f"{where}: ip {entry['ip']!r} is not an IPv4 address") from None
        hosts.append(HostPort(**entry))
    return hosts


def parse_args(argv=None) -> argparse.Namespace:
    """The controller's command line; a bad flag ends with argparse's one-line error."""
    parser = argparse.ArgumentParser(
        prog=program(__name__),
        description="SDN controller (Ryu, OpenFlow 1.3) that enforces a coflow scheduling "
        "policy with DSCP-marking rules and meters, with a REST API for HPO tasks, stages, "
        "jobs and coflows.",
    )
    parser.add_argument(
        "--policy",
        default="beamer",
        type=policy_name,
        help=f"ordering policy: {policy_help(POLICY_NAMES)} (default: beamer; a policy saved in "
        "--db wins if it is a built-in or loaded at start)",
    )
    parser.add_argument(
        "--load-policy",
        action="append",
        default=[],
        type=policy_name,
        metavar="POLICY",
        help="also load this policy of your own (package.module:Class or an entry point's "
        "name) at start, so that PUT /api/policy may switch to it: requests import no code "
        "(repeatable)",
    )
    parser.add_argument(
        "--policy-option",
        action="append",
        default=[],
        type=_option,
        metavar="KEY=VALUE",
        help="policy option, e.g. use_rates=true (repeatable; GET /api/policy lists each "
        "policy's options with types and ranges)",
    )
    parser.add_argument(
        "--ofp-host", default="127.0.0.1", help="OpenFlow listen address (default: %(default)s)"
    )
    parser.add_argument(
        "--ofp-port", type=tcp_port, default=6653, help="OpenFlow port (default: %(default)s)"
    )
    parser.add_argument(
        "--rest-host", default="127.0.0.1", help="REST API listen address (default: %(default)s)"
    )
    parser.add_argument(
        "--rest-port", type=tcp_port, default=8080, help="REST API port (default: %(default)s)"
    )
    parser.add_argument(
        "--api-token",
        default=os.environ.get("HPO_API_TOKEN"),
        help="require 'Authorization: Bearer TOKEN' on every REST request and on /metrics "
        "(default: the HPO_API_TOKEN environment variable; none: anyone who can connect may "
        "change the schedule, so keep --rest-host on loopback)",
    )
    parser.add_argument(
        "--stats-interval",
        type=non_negative(float),
        default=5.0,
        metavar="S",
        help="seconds between requests for every switch's port and queue counters, which "
        "/metrics serves as bytes per port and priority level (default: 5; 0: never ask)",
    )
    parser.add_argument(
        "--db",
        default="controller.sqlite",
        help="SQLite registry file, reloaded on restart (default: %(default)s)",
    )
    parser.add_argument(
        "--tick",
        type=positive(float),
        default=1.0,
        help="seconds between periodic reorders (default: 1)",
    )
    parser.add_argument(
        "--port-bps",
        type=positive(float),
        default=20e6,
        help="capacity of every host port in bit/s (default: 20e6)",
    )
    parser.add_argument("--hosts", help="JSON file of hosts: name, ip, mac, switch, port, bps")
    parser.add_argument(
        "--verbose", action="store_true", help="debug logging, and one log line per REST request"
    )
    args = parser.parse_args(argv)  # (--help ends here, before the core is imported)
    try:
        args.host_list = load_hosts(args.hosts) if args.hosts else []
    except ValueError as exc:
        parser.error(str(exc))
    from controller.policies import parse_option_text

    try:  # typed by the policy's own declaration: use_rates=False is False, not a string
        args.options = {
            key: parse_option_text(args.policy, key, text) for key, text in args.policy_option
        }
    except ValueError as exc:
        parser.error(f"--policy-option: {exc}")
    return args


def check_database(path: str) -> str | None:
    """Open the registry once before Ryu starts: ``DatabaseError`` (one line naming the file)
    if it cannot be used; a note to print if it is an empty file (it then starts empty)."""
    from controller.registry import DatabaseError, Registry

    if os.path.isdir(path):
        raise DatabaseError(f"{path}: is a directory, not a registry file")
    empty = os.path.isfile(path) and os.path.getsize(path) == 0
    Registry(path).close()
    if empty:
        return f"note: --db {path} was an empty file; starting with no registered records"
    return None


def main(argv=None) -> int:
    """Start the controller (Ryu app, REST API, registry); the exit status for the shell."""
    args = parse_args(argv)
    from controller.api import is_loopback
    from controller.registry import DatabaseError

    options = args.options
    try:
        note = check_database(args.db)
    except DatabaseError as exc:
        print(f"{program(__name__)}: error: --db {exc}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    if not is_loopback(args.rest_host) and not args.api_token:
        print(
            f"warning: the REST API listens on {args.rest_host or 'every address'} without a "
            "token: anyone who can reach it may change the schedule (set --api-token or "
            "HPO_API_TOKEN)",
            file=sys.stderr,
        )
    try:  # (Ryu only here: --help and the argument checks work without it)
        from controller import ryu_app
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] != "ryu":
            raise
        print(f"{program(__name__)}: error: ryu is not installed: `sudo bash scripts/setup.sh` "
              "installs it (or pip install -r requirements.txt)", file=sys.stderr)  # fmt: skip
        return 1
    # (the kernels load now, not in the first reorder: compiled the first time on a machine)
    from controller.warm import warm_up

    try:
        warm_up()
    except Exception as exc:  # (the first reorder then loads them, as it did before)
        print(f"warning: the compiled kernels could not be loaded ahead: {exc}", file=sys.stderr)
    settings = ryu_app.Settings(
        policy=args.policy,
        policy_options=options,
        offered_policies=args.load_policy,
        db_path=args.db,
        tick_s=args.tick,
        link_bps=args.port_bps,
        hosts=args.host_list,
        verbose=args.verbose,
        rest_host=args.rest_host,
        api_token=args.api_token or None,
        stats_s=args.stats_interval,
    )
    extra = ["--verbose"] if args.verbose else []
    ryu_app.run_manager(
        settings, args.ofp_host, args.ofp_port, args.rest_host, args.rest_port, extra
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
