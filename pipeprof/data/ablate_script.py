"""``pipeprof compare --ablation -- CMD``: the user's script, started once more without
horovodrun and pinned to one rank's cores, stops at ``pipeprof.keras.instrument`` and
measures each transformation of the dataset it was handed (``data.chain``), then ends."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import tensorflow as tf

from pipeprof import atomic
from pipeprof.data import chain
from pipeprof.launch import topology
from pipeprof.launch.job import ScriptJob

FILE = (
    "script_stages.csv"  # in the run directory: one row per transformation of the user's pipeline
)


def ablate_and_exit(dataset: tf.data.Dataset, job: ScriptJob) -> None:
    rows = chain.measure(chain.links(dataset), seconds=job.seconds)
    frame = pd.DataFrame(rows)
    frame.insert(1, "cores", topology.usable_cores())
    atomic.write_text(Path(job.run_dir) / FILE, frame.to_csv(index=False, float_format="%.5g"))
    print(
        f"pipeprof: measured {len(rows)} transformations of the script's dataset alone; the script ends here",
        flush=True,
    )
    raise SystemExit(0)
