"""horovodrun for pipeprof's own ranks, without its build probe.

Before it starts anything, horovodrun asks whether Horovod was built with the controller it
will use (Gloo or MPI) by forking itself and importing ``horovod.tensorflow`` in the child:
TensorFlow's whole import (2.5 s of wall and CPU per launch on the 2-core development
machine, more with CUDA), only to answer a yes or no. pipeprof's own ranks import
``horovod.tensorflow`` anyway and ask the same question first thing (``rank.worker``), with
a one-line error when the answer is no; so their launches skip the probe. A user's own
script is launched by horovodrun itself, probe and all (``workflows.script``).

    python -m pipeprof.launch.hvdrun HOROVODRUN_ARGS...
"""

from __future__ import annotations

import sys


def main() -> int:
    from horovod.runner import launch

    launch.gloo_built = launch.mpi_built = (
        lambda verbose=False: True
    )  # the ranks check (rank.worker)
    sys.argv[0] = "horovodrun"
    launch.run_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
