"""A fake launcher (``launch.launcher = "fake"``), registered as any launcher is
(``launch.launcher.register``): it starts ``np`` local processes of the rank command with
PMI's rank variables (as MPICH's Hydra does) and waits for them all; one failing rank ends
the others. Its environment carries the fake input library's settings (``tests.fakes.inputs``).

    python -m tests.fakes.launcher NP CMD...
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Any

from pipeprof.launch.launcher import base_env, check_slots
from pipeprof.scenario import LaunchConfig
from tests.fakes.inputs import ENV_BATCH_MS, ENV_FAIL_RANK, ENV_KILL_RANK


class FakeLauncher:
    name = "fake"

    def __init__(self, batch_ms: float = 0.0, fail_rank: int = -1, kill_rank: int = -1) -> None:
        self.batch_ms, self.fail_rank, self.kill_rank = batch_ms, fail_rank, kill_rank
        self.launches = 0

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        check_slots(np, launch, gpu_count)

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        return dict(
            base_env(base, cwd),
            **{
                ENV_BATCH_MS: str(self.batch_ms),
                ENV_FAIL_RANK: str(self.fail_rank),
                ENV_KILL_RANK: str(self.kill_rank),
            },
        )

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        self.launches += 1
        return [sys.executable, "-m", "tests.fakes.launcher", str(np), *rank_cmd]

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        return [sys.executable, "-m", "tests.fakes.launcher", str(np), *cmd]

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        m = re.fullmatch(r"fake launcher: rank (\d+) exited with (-?\d+)", line)
        return (int(m.group(1)), int(m.group(2))) if m else None


def main(argv: list[str]) -> int:
    np, cmd = int(argv[0]), argv[1:]
    procs = [
        subprocess.Popen(
            cmd,
            env=dict(
                os.environ,
                PMI_RANK=str(r),
                PMI_SIZE=str(np),
                MPI_LOCALRANKID=str(r),
                MPI_LOCALNRANKS=str(np),
            ),
        )
        for r in range(np)
    ]
    code, said = 0, set()

    def say_ends() -> None:  # each rank's end, once, as a launcher says it
        for r, p in enumerate(procs):
            if p.returncode is not None and r not in said:
                said.add(r)
                print(f"fake launcher: rank {r} exited with {p.returncode}", flush=True)

    while [p.poll() for p in procs].count(None):  # poll every rank, each time
        say_ends()
        if code == 0 and (failed := [p.returncode for p in procs if p.returncode not in (None, 0)]):
            code = failed[0]
            for p in procs:  # one rank died: the job is over, as under horovodrun
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.02)
    say_ends()
    return code or next((p.returncode for p in procs if p.returncode), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
