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
        (["--rest-port", "x"], "not a int"),
        (["--tick", "0"], "must be > 0"),
        (["--policy", "sjf"], "invalid choice: 'sjf'"),
        (["--policy-option", "novalue"], "expected KEY=VALUE"),
        (["--policy", "jpas", "--policy-option", "colour=1"], "bad options"),
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


def test_help_shows_loopback_defaults():
    result = controller_cli("--help")
    assert result.returncode == 0
    assert "--policy" in result.stdout and "127.0.0.1" in result.stdout
