"""Run under horovodrun: each rank reads one epoch of its real pipeline shard, then trains a
few steps through Horovod's DistributedOptimizer. Rank 0 writes what every rank saw, and a
checksum of every rank's weights, to the JSON file named on the command line."""

import json
import sys

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import tensorflow as tf

from pipeprof.data import pipeline
from pipeprof.models import build_model
from pipeprof.scenario import AugmentConfig, DataConfig, PipelineConfig

out_path, root, classes = sys.argv[1], sys.argv[2], int(sys.argv[3])
hvd.init()
data = DataConfig(source="folder", image_size=32, num_classes=classes)
pipe = PipelineConfig(augment=AugmentConfig(enabled=False))
shard = pipeline.Shard(hvd.rank(), hvd.size())
ds = pipeline.build(data, pipe, data_root=root, shard=shard, batch_size=1, epochs=1, with_ids=True)
ids = [p.decode() for _, _, batch in ds for p in batch.numpy()]

model = build_model("small_cnn", (32, 32, 3), classes)
model.compile(
    optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.05, momentum=0.9)),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
hvd_tf.broadcast_variables(model.variables, root_rank=0)
train = pipeline.build(data, pipe, data_root=root, shard=shard, batch_size=4)
step = tf.function(lambda x, y: model.train_step((x, y)))
for x, y in train.take(3):  # each rank trains on different data...
    step(x, y)
checksum = float(
    sum(float(tf.reduce_sum(tf.cast(v, tf.float64))) for v in model.trainable_variables)
)

gathered = hvd_tf.allgather_object({"rank": hvd.rank(), "ids": ids, "checksum": checksum})
if hvd.rank() == 0:
    with open(out_path, "w") as fh:
        json.dump(gathered, fh)
