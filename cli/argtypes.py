"""argparse types shared by the command lines (controller, simulator, scripts).

Each rejects what is not a finite number of the right kind in range with a one-line error that
argparse prefixes with the flag (``argument --interarrival: must be >= 0, got -5``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

KIND_NAMES = {int: "an integer", float: "a number"}


def number(kind: type, low: float | None = None, high: float | None = None, low_open: bool = False):
    """An argparse type: a finite ``kind`` (int or float) in ``[low, high]`` (``(low, high]``
    when ``low_open``); either bound may be ``None`` (no bound)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {KIND_NAMES[kind]}: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if low is not None and (value <= low if low_open else value < low):
            raise argparse.ArgumentTypeError(
                f"must be {'>' if low_open else '>='} {low}, got {text}"
            )
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {text}")
        return value

    return parse


def positive(kind: type) -> Callable[[str], float]:
    """An argparse type: a finite ``kind`` (int or float) greater than 0."""
    return number(kind, 0, low_open=True)


def non_negative(kind: type) -> Callable[[str], float]:
    """An argparse type: a finite ``kind`` (int or float) of at least 0."""
    return number(kind, 0)


def fraction(text: str) -> float:
    """An argparse type: a number in [0, 1]."""
    return number(float, 0, 1)(text)


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port number (1..65535)."""
    value = number(int)(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text}")
    return value
