"""The REST client maps failures to ControllerError (the happy path runs in integration tests)."""

from __future__ import annotations

import socket

import pytest

from workloads.client import ControllerClient, ControllerError


def test_unreachable_controller_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket is closed
    client = ControllerClient(f"http://127.0.0.1:{port}", timeout_s=1)
    with pytest.raises(ControllerError) as err:
        client.policy()
    assert err.value.status == 0
    assert "cannot reach the controller" in str(err.value)
    with pytest.raises(ControllerError):
        client.wait_ready(timeout_s=0.3)
