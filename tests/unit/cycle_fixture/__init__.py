"""A package with an import cycle that only a function-local import closes: the cycle test
must find it (tests/unit/test_layers.py)."""
