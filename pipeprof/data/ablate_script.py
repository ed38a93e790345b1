"""``pipeprof compare --ablation -- CMD``: the user's script, started once more without
horovodrun and pinned to one rank's cores, stops at ``pipeprof.keras.instrument`` and
measures each transformation of the dataset it was handed (``data.chain``), then ends."""

from __future__ import annotations

import pandas as pd
import tensorflow as tf

from pipeprof.data import chain
from pipeprof.launch import topology
from pipeprof.launch.job import ScriptJob
from pipeprof.rundir import RunDir


def ablate_and_exit(dataset: tf.data.Dataset, job: ScriptJob) -> None:
    rows = chain.measure(chain.links(dataset), seconds=job.seconds)
    frame = pd.DataFrame(rows)
    frame.insert(1, "cores", topology.usable_cores())
    RunDir(job.run_dir).write_script_stages(frame)
    print(
        f"pipeprof: measured {len(rows)} transformations of the script's dataset alone; the script ends here",
        flush=True,
    )
    raise SystemExit(0)
