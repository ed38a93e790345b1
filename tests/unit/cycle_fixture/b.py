"""Imports a inside a function: a cycle all the same."""


def g():
    from tests.unit.cycle_fixture import a

    return a
