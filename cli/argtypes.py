"""argparse types shared by the command lines (controller, simulator, scripts)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive(kind: type) -> Callable[[str], float]:
    """An argparse type: a ``kind`` (int or float) greater than 0, or a clear error."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind.__name__}: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port number (1..65535)."""
    value = positive(int)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text}")
    return value
