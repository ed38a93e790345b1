"""PyTorch DataLoader's knobs (``[pipeline.loader]``) and the one line that names a loader
worker that failed: pure Python, no torch needed."""

import signal

import pytest

from pipeprof import plugins
from pipeprof.errors import PipeprofError
from pipeprof.inputs.dataloader import worker_failure
from pipeprof.scenario import load, parse_override


def loaded(*sets: str):
    return load("quickstart", [parse_override(s) for s in sets])


def test_the_knobs_load_and_a_bad_one_names_its_key():
    s = loaded("pipeline.loader.num_workers=3", "pipeline.loader.persistent_workers=false")
    assert (s.pipeline.loader.num_workers, s.pipeline.loader.persistent_workers) == (3, False)
    assert s.pipeline.loader.set_keys() == ["num_workers", "persistent_workers"]
    with pytest.raises(PipeprofError, match=r"loader\.num_workers must be >= 0"):
        loaded("pipeline.loader.num_workers=-1")
    with pytest.raises(PipeprofError, match=r"loader\.prefetch_factor must be >= 1"):
        loaded("pipeline.loader.prefetch_factor=0")


def test_a_loader_knob_on_tf_data_is_refused_not_ignored():
    s = loaded("pipeline.loader.num_workers=2", "train.engine=mirrored")
    with pytest.raises(PipeprofError) as got:
        plugins.resolve(s)
    assert "pipeline.loader.num_workers" in got.value.message
    assert "data.library tfdata builds no DataLoader" in got.value.message


# PyTorch 2.13's own words (torch/csrc/DataLoader.cpp and torch/utils/data/dataloader.py)
KILLED = "DataLoader worker (pid 4242) is killed by signal: Killed. "
SHM = (
    "DataLoader worker (pid 77) is killed by signal: Bus error. It is possible that "
    "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."
)
GONE = "DataLoader worker (pid(s) 4242, 4243) exited unexpectedly"


@pytest.mark.parametrize(
    "message, codes, said",
    [
        (KILLED, {}, "loader worker pid 4242 killed by SIGKILL"),
        (SHM, {}, "loader worker pid 77 killed by SIGBUS: out of shared memory (/dev/shm)"),
        (GONE, {4242: -signal.SIGKILL}, "loader worker pid 4242 killed by SIGKILL"),
        (
            GONE,
            {4242: 3},
            "loader worker pid 4242 exited with code 3; loader worker pid 4243 exited",
        ),
        (
            "DataLoader timed out after 30 seconds",
            {},
            "no loader worker handed over a batch in 30 s (pipeline.loader.timeout_s): a worker is hung",
        ),
    ],
    ids=["signal", "shm", "reaped", "exit-code", "hung"],
)
def test_a_failed_worker_is_one_line_with_its_pid_and_cause(message, codes, said):
    line = worker_failure(message, 30.0, codes)
    assert line is not None and said in line and "\n" not in line, line


def test_a_worker_s_death_raised_in_the_step_is_the_rank_s_one_line_too():
    """PyTorch's SIGCHLD handler raises in the main thread wherever it is, in the model's step as
    often as in the loader's next(): the rank's own failure path names the worker as well."""
    from pipeprof.rank.worker import _input_failure

    said = _input_failure(RuntimeError("DataLoader worker (pid 4321) is killed by signal: Killed."))
    assert said == (
        "data.library dataloader: loader worker pid 4321 killed by SIGKILL (a kill -9, or the "
        "kernel's out-of-memory killer)"
    )
    assert _input_failure(RuntimeError("shape mismatch")) is None


def test_any_other_error_is_left_as_it_is():
    assert worker_failure("CUDA error: out of memory", 30.0) is None


def test_the_tuned_loader_is_written_as_code_with_every_auto_as_its_value():
    from pipeprof.tune.space import dataloader_code

    pipe = loaded().pipeline  # every knob "auto": parallel_calls and prefetch autotuned
    code = dataloader_code(pipe, cores=3)
    assert "num_workers=3," in code and "prefetch_factor=2," in code, code
    assert "pin_memory=torch.cuda.is_available()," in code and "auto" not in code, code
    none = dataloader_code(loaded("pipeline.loader.num_workers=0").pipeline, cores=3)
    assert "num_workers=0," in none and "prefetch_factor" not in none, none
