"""A script's PyTorch under ``compare --engine ddp``: each rank its share of the host's cores,
unless the user set ``OMP_NUM_THREADS`` (``ddp.script_threads``). In the torch venv."""

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.horovod, pytest.mark.torch]

# torch imported before pipeprof (its pool sized already), or after (it reads the variable)
PROBE = (
    "import os, torch; from pipeprof.distributions.ddp import script_threads; "
    "script_threads({local}); print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])"
)
AFTER = (
    "import os; from pipeprof.distributions.ddp import script_threads; script_threads({local}); "
    "import torch; print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])"
)


def threads(local: int, probe: str = PROBE, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    got = subprocess.run(
        [sys.executable, "-c", probe.format(local=local)],
        capture_output=True, text=True, check=True, env={**base, **env},
    )  # fmt: skip
    return got.stdout.strip()


def test_each_rank_gets_its_share_of_the_cores_and_the_users_setting_wins():
    from pipeprof.launch.topology import cores_per_rank

    share = cores_per_rank(2)
    assert threads(2) == f"{share} {share}"
    assert threads(1) == f"{cores_per_rank(1)} {cores_per_rank(1)}"
    assert threads(2, AFTER) == f"{share} {share}"
    assert threads(1, OMP_NUM_THREADS="1") == "1 1"  # the user's, untouched
