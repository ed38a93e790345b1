"""pipeprof in your own Keras training script: two lines.

    import pipeprof.keras as pk
    dataset = pk.instrument(dataset)                       # before model.fit
    model.fit(dataset, ..., callbacks=[..., pk.PipeprofCallback()])

or, in a custom training loop:

    for x, y in pk.instrument(dataset):                    # or a tf.distribute dataset
        with pk.step() as s:
            s.loss = train_step(x, y)

Outside pipeprof they change nothing: ``instrument`` returns the dataset itself, the
callback and ``step`` do nothing. Under ``pipeprof watch -- CMD`` the steps stream to the
live dashboard. Under ``pipeprof compare --np 1,2 -- python train.py ARGS`` (one launch per
worker count) the callback measures the synthetic twin alone, then your pipeline in rounds
against it, and ends ``fit`` once the gap is known; a custom loop's iteration ends the same
way. Under ``compare --ablation``, ``instrument`` measures each transformation of a tf.data
pipeline alone, writes the figures to the run directory and ends the script there.

The same lines serve Keras 2 (TensorFlow 2.15, with Horovod or tf.distribute:
``frameworks.keras2_script``) and Keras 3 (on JAX with ``keras.distribution``, or on
TensorFlow with tf.distribute: ``frameworks.keras3_script``), whichever is installed.
"""

from __future__ import annotations

from pipeprof.frameworks.keras3 import Keras3
from pipeprof.rank import in_script

in_script.prepare_distribution()  # before the script's framework starts: its devices

if Keras3.installed():
    from pipeprof.frameworks import keras3_script as _chosen
else:
    from pipeprof.frameworks import keras2_script as _chosen  # type: ignore[no-redef]

instrument = _chosen.instrument
step = _chosen.step
step_fn = _chosen.step_fn
PipeprofCallback = _chosen.PipeprofCallback

__all__ = ["PipeprofCallback", "instrument", "step", "step_fn"]
