"""Imports b at the top."""

from tests.unit.cycle_fixture import b


def f():
    return b.g()
