"""Bad command-line input gets a one-line error and exit status 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def controller_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--ofp-port", "70000"], "not a TCP port"),
        (["--rest-port", "x"], "not an integer"),
        (["--tick", "0"], "must be > 0"),
        (["--policy", "sjf"], "argument --policy: unknown policy 'sjf'; choose from beamer"),
        (["--policy", "no_such_module:P"], "policy 'no_such_module:P': no module named"),
        (["--load-policy", "examples.smallest_first"], "write examples.smallest_first:ClassName"),
        (["--policy-option", "novalue"], "expected KEY=VALUE"),
        (["--policy", "jpas", "--policy-option", "colour=1"], "has no option 'colour'"),
        (
            ["--policy", "varys", "--policy-option", "use_rates=maybe"],
            "use_rates must be true or false, got 'maybe'",
        ),
        (
            ["--policy", "fifo-lm", "--policy-option", "heavy_threshold_bytes=abc"],
            "heavy_threshold_bytes must be a number in (0, 1.61575e+21] or null",
        ),
        (["--hosts", "/nonexistent/hosts.json"], "No such file"),
    ],
)
def test_bad_flags(args, words):
    result = controller_cli(*args)
    assert result.returncode == 2
    assert words in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_hosts_file_names_the_entry(tmp_path):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([{"name": "h1", "ip": "10.0.0.1"}, {"name": "h2", "ip": "x"}]))
    result = controller_cli("--hosts", str(hosts))
    assert result.returncode == 2
    assert "host [1]: ip 'x' is not an IPv4 address" in result.stderr


def test_a_hosts_switch_and_port_are_whole_numbers(tmp_path):
    from controller.__main__ import load_hosts

    hosts = tmp_path / "hosts.json"
    good = {"name": "h1", "ip": "10.0.0.1", "mac": "00:00:00:00:00:01", "switch": 2, "port": 1}
    hosts.write_text(json.dumps([good]))
    assert load_hosts(str(hosts))[0].switch == 2
    for key, value in (("switch", "leaf1"), ("port", -1), ("switch", True)):
        hosts.write_text(json.dumps([{**good, key: value}]))
        result = controller_cli("--hosts", str(hosts))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert f"host [0]: {key} {value!r} is not a non-negative integer" in result.stderr


def test_help_shows_loopback_defaults():
    result = controller_cli("--help")
    assert result.returncode == 0
    assert "--policy" in result.stdout and "127.0.0.1" in result.stdout


def _corrupt(path):
    path.write_bytes(b"this is not a database, " * 200)


def _stored_garbage(path):
    import sqlite3

    from controller.registry import Registry

    Registry(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO records VALUES ('jobs', 4, '{\"job_id\": 4, \"colour\": 1}')")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_corrupt, "cannot use it as the registry: file is not a database"),
        (lambda p: p.mkdir(), "is a directory"),
        (_stored_garbage, "stored job 4: colour: unknown field"),
    ],
)
def test_an_unusable_database_is_one_line_naming_the_file(tmp_path, make, words):
    db = tmp_path / "registry.sqlite"
    make(db)
    result = controller_cli("--db", str(db))
    assert result.returncode == 2
    assert f"--db {db}: " in result.stderr and words in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_database_in_a_missing_folder_is_refused(tmp_path):
    result = controller_cli("--db", str(tmp_path / "missing" / "registry.sqlite"))
    assert result.returncode == 2 and "unable to open database file" in result.stderr


def test_an_empty_database_file_is_said_out_loud(tmp_path):
    from controller.__main__ import check_database

    db = tmp_path / "registry.sqlite"
    db.touch()
    assert "was an empty file; starting with no registered records" in check_database(str(db))
    assert check_database(str(db)) is None  # now a registry, even if it holds nothing
