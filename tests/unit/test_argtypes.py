"""The argparse types every command line shares."""

from __future__ import annotations

import argparse

import pytest

from cli.argtypes import fraction, non_negative, number, positive, tcp_port


@pytest.mark.parametrize(
    ("parse", "text", "words"),
    [
        (positive(float), "0", "must be > 0"),
        (positive(float), "nan", "must be a finite number"),
        (positive(float), "-inf", "must be a finite number"),
        (positive(int), "2.0", "not an integer"),
        (non_negative(float), "-0.1", "must be >= 0"),
        (fraction, "1.01", "must be <= 1"),
        (number(int, 2), "1", "must be >= 2"),
        (tcp_port, "0", "not a TCP port"),
        (tcp_port, "65536", "not a TCP port"),
    ],
)
def test_refusals_say_why(parse, text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        parse(text)


def test_accepted_values_keep_their_kind():
    assert positive(int)("3") == 3 and isinstance(positive(int)("3"), int)
    assert non_negative(float)("0") == 0.0
    assert fraction("1") == 1.0 and tcp_port("65535") == 65535
