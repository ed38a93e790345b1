import fcntl
import os
import re
import threading

import pytest


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test():
    """pipeprof's background threads (samplers, output pumps) must stop with their owner."""
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before and t.is_alive() and t.name.startswith("pipeprof")
    ]
    assert not leaked, f"threads outlived the test: {leaked}"


def pytest_xdist_auto_num_workers(config):
    """The workers ``-n auto`` (pyproject.toml) starts: two for the suite, whose launch files
    keep both cores busy (and whose files that measure contention hold them alone); one more
    than the cores for the fast tier (``-m "not horovod"``), whose tests mostly wait (fake
    ranks' sleeps, timeouts, subprocesses' start): at two workers it kept the 2 cores 66%
    busy and took 66-70 s, at three 56-59 s (2026-11-27 and 28, four runs each).
    PYTEST_XDIST_AUTO_NUM_WORKERS, where set, decides instead, as xdist's own rule reads it."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if fast_tier(config):
        return (os.cpu_count() or 2) + 1
    return 2


@pytest.fixture(scope="module", autouse=True)
def the_cores(request, tmp_path_factory):
    """The suite runs on two pytest-xdist workers, a test file at a time on each. A file marked
    ``alone`` measures CPU contention itself (CPU-trained ranks; a gap that grows because the
    pipeline has fewer cores): it holds the cores alone, and the other worker waits.
    The other files share them.

    A readers-writer lock over the workers' common temporary folder, writer first: a file that
    must run alone takes the turnstile, so no new file starts while it waits for the running
    one to end. Autouse and module-scoped, so it is taken before the file's own fixtures run."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield  # one process: nothing runs beside this file
        return
    shared = tmp_path_factory.getbasetemp().parent  # pytest's run folder, above each worker's own
    alone = request.node.get_closest_marker("alone") is not None
    with (
        open(shared / "cores.turnstile", "a") as turnstile,
        open(shared / "cores.lock", "a") as cores,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(cores, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(cores, fcntl.LOCK_UN)


# Seconds each launch file's tests took (calls and their own set-up, not the wait for the
# cores) in a run of the whole suite on the 2-core development machine (2026-11-26, on
# e94f054), less the tests that left since (the truth slice's control, now a file that runs
# alone; two of the three stop signals across hosts), with the tests added later that day
# (test_mirrored.py's two; custom loops, the decode-less remedy, watch of a loop) measured in
# runs of their own: the order in which the two workers take them, longest first, so that
# neither is left with a long file while the other has finished. A file not listed counts as
# short, so a long one missing here comes last (the truth slice's 147 s did; it now runs
# alone, among the first).
LAUNCH_FILE_SECONDS = {
    "test_two_hosts.py": 377,
    "test_user_script.py": 165,
    "test_mirrored.py": 150,
    "test_predict_emulated.py": 119,
    "test_compare_np2.py": 103,
    "test_diagnose_and_tune.py": 46,  # its model-bound verdict (83 s) runs alone since 2026-11-27
    "test_custom_loop.py": 150,
    "test_user_batches.py": 60,
    "test_service_np2.py": 54,
    "test_signals_np2.py": 55,  # +8 s since: the tf.distribute rank's end (2026-11-27)
    "test_bad_files.py": 35,
    "test_bad_records.py": 30,
    "test_live_np2.py": 70,
    "test_diff.py": 21,
    "test_horovod_np2.py": 40,
    "test_rank_external.py": 10,
    "test_quiet.py": 8,  # two imports of TensorFlow
    "test_benchmark_smokes.py": 190,  # the smoke runs of the slow tier's benchmarks
    # skipped here: scripts/keras3.sh runs these in the Keras 3 venv, in this order (the
    # clean-clone CI run on d72010b, 2026-11-28, its quickstart tests since moved out)
    "test_keras3.py": 315,
    "test_keras3_hosts.py": 232,
    "test_keras3_quickstart.py": 260,
    "test_ddp.py": 1,  # skipped here: scripts/torch.sh runs these in the torch venv
    "test_ddp_torchrun.py": 1,
    "test_ddp_hosts.py": 1,
    "test_dask.py": 1,
    "test_ddp_threads.py": 1,
    "test_grain.py": 1,
}

# Seconds each of the fast tier's longer files took alone on the 2-core development machine
# (2026-11-28, pytest -n 0 per file): the order in which its workers take them, longest first,
# as for the launch files. A file not listed counts as short. Files whose tests time threads
# against sleeps (test_plan.py, test_supervision.py) are left out on purpose: they come after
# the CPU-heavy ones, whose load would slow those threads.
FAST_FILE_SECONDS = {
    "test_fake_stack.py": 16,  # mostly its fake ranks' sleeps: best beside the CPU-heavy files
    "test_seams.py": 12,  # the same
    "test_pipeline.py": 24,
    "test_renderers.py": 22,
    "test_stagebench.py": 15,
    "test_two_hosts.py": 19,
    "test_bad_records.py": 12,
    "test_bad_files.py": 12,
    "test_benchmarks.py": 14,
}


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory):
    """A real generated image folder (the integration and cluster tests'): 3 classes, 90 JPEGs of 48px."""
    from pipeprof.data.generate import generate
    from pipeprof.scenario import GenerateConfig

    cfg = GenerateConfig(images=90, size=48, classes=3, seed=5)
    return generate(cfg, tmp_path_factory.mktemp("data") / "small"), cfg


def keras3_installed() -> bool:
    """Whether this venv has the Keras 3 stack (Keras 3 with JAX), whose tests need it."""
    from importlib.util import find_spec

    from pipeprof.frameworks.keras3 import Keras3

    return Keras3.installed() and find_spec("jax") is not None


def torch_installed() -> bool:
    """Whether this venv has PyTorch, which the ddp engine's tests need."""
    from importlib.util import find_spec

    return find_spec("torch") is not None


def pytest_collection_modifyitems(config, items):
    """Files that run alone first, then the launches, longest first, then the unit files: the
    alone files do not wait for a shared file to end before they start, and the short unit
    files fill the workers' ends (longest first packs two workers best). Each file's tests
    stay together and in order: the sort is stable and its key is the file's. xdist keeps this
    order only with --no-loadscope-reorder (pyproject.toml); by default it hands out the files
    with the most tests first, which put the alone files in the middle and left one worker
    waiting for the other's long file before each. In the fast tier the horovod tests, about
    to be deselected, rank nothing: its files go longest first by FAST_FILE_SECONDS."""

    def marked(item, name: str) -> bool:
        return item.get_closest_marker(name) is not None

    fast = fast_tier(config)
    # a file's rank from its tests' markers, so its tests keep the order they are written in
    # (a file's last tests may rely on it: the Slurm tests start daemons the others would see)
    ranks: dict[str, tuple[int, float]] = {}
    for item in items:
        key = str(item.path)
        if fast and marked(item, "horovod"):
            continue
        if marked(item, "alone"):
            ranks[key] = (0, 0.0)
        elif marked(item, "horovod") and ranks.get(key, (2, 0.0))[0] > 1:
            ranks[key] = (1, -LAUNCH_FILE_SECONDS.get(item.path.name, 0))
        else:
            ranks.setdefault(key, (2, -FAST_FILE_SECONDS.get(item.path.name, 0)))
    items.sort(key=lambda item: ranks.get(str(item.path), (3, 0.0)))
    if not torch_installed():  # the torch stack's tests run in its own venv (scripts/torch.sh)
        skip_torch = pytest.mark.skip(reason="needs PyTorch (scripts/torch.sh runs it)")
        for item in items:
            if marked(item, "torch"):
                item.add_marker(skip_torch)
    if not keras3_installed():  # the legacy venv: scripts/keras3.sh runs these in their own
        skip = pytest.mark.skip(reason="needs the Keras 3 stack (scripts/keras3.sh runs it)")
        for item in items:
            if marked(item, "keras3"):
                item.add_marker(skip)


def fast_tier(config) -> bool:
    """Whether this run is the fast tier, ``-m "not horovod"``."""
    return "".join(config.option.markexpr.split()) == "nothorovod"


def pytest_ignore_collect(collection_path, config):
    """The fast tier (``-m "not horovod"``) does not import a test file whose every test is
    marked horovod (its module's ``pytestmark``): each worker imports every file it collects,
    and the launch files import TensorFlow, a few seconds of CPU a worker for tests it would
    deselect."""
    if not fast_tier(config):
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    marks = re.search(r"^pytestmark = (.+)$", collection_path.read_text(), re.M)
    return True if marks and "horovod" in marks.group(1) else None
