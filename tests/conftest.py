import threading

import pytest


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test():
    """pipeprof's background threads (samplers, output pumps) must stop with their owner."""
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = [t.name for t in threading.enumerate()
              if t.ident not in before and t.is_alive() and t.name.startswith("pipeprof")]
    assert not leaked, f"threads outlived the test: {leaked}"
