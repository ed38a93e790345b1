"""What do the bad-file checks cost a good sample? The real pipeline against the same pipeline
without them, side by side.

Method: the read stage only (list, read, decode, resize to 64px; no shuffle, augmentation or
prefetch), batches of 50, one tf.data thread (``parallel_calls = 1``, a private pool of 1), on
1,000 generated 96px JPEGs, as an image folder and as 4 TFRecord files of the same images.

* checked: ``pipeline.build`` as compare runs it: the files are read in groups, checked as
  vectors and the bad ones dropped (``data.screen``), then each is decoded.
* unchecked: the pipeline as it was before the checks: one map per file that reads, decodes
  and labels it (folder), or an interleave of ``TFRecordDataset`` and one map that parses and
  decodes each record.

Each round builds both afresh and, in alternating order (A B, then B A), pulls 25 warm-up
batches and then ``--batches`` measured ones from each: the process's CPU time per sample
(every tf.data thread included). One pipeline at a time: tf.data's threads work ahead, so
two open pipelines would charge each other's work. The result is the median over rounds of
the per-round ratio checked / unchecked, and the medians of each.

    .venv/bin/python benchmarks/bad_file_checks.py [--source folder|tfrecord] [--rounds 16]

``--smoke`` (CI): both sources, 100 images, one round of 4 batches each, then a check that
every figure printed is a finite cost above 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tensorflow as tf

from pipeprof.data import pipeline
from pipeprof.data.generate import generate
from pipeprof.scenario import (
    AugmentConfig,
    DataConfig,
    GenerateConfig,
    PipelineConfig,
    PrefetchConfig,
    ShuffleConfig,
)

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402

PIPE = PipelineConfig(
    augment=AugmentConfig(enabled=False),
    shuffle=ShuffleConfig(enabled=False),
    prefetch=PrefetchConfig(enabled=False),
    parallel_calls=1,
    private_threadpool_size=1,
    max_intra_op_parallelism=1,
)
SIZE = 64


def unchecked(data: DataConfig, root: str) -> tf.data.Dataset:
    """The read stage as it was before the checks."""
    if data.source == "folder":
        files, classes = pipeline.list_image_folder(root)
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(classes), tf.range(len(classes), dtype=tf.int32)
            ),
            -1,
        )

        def read(path):
            return pipeline._decode(tf.io.read_file(path), SIZE), table.lookup(
                tf.strings.split(path, os.sep)[-2]
            )

        ds = tf.data.Dataset.from_tensor_slices(files).map(read, num_parallel_calls=1)
    else:
        files = pipeline.list_tfrecords(data.path)
        features = {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        }

        def parse(record):
            ex = tf.io.parse_single_example(record, features)
            return pipeline._decode(ex["image/encoded"], SIZE), tf.cast(
                ex["image/class/label"], tf.int32
            )

        ds = tf.data.Dataset.from_tensor_slices(files).interleave(
            tf.data.TFRecordDataset, cycle_length=min(8, len(files)), num_parallel_calls=1
        )
        ds = ds.map(parse, num_parallel_calls=1)
    options = tf.data.Options()
    options.deterministic = PIPE.deterministic  # as build sets it
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    return ds.repeat().batch(50, drop_remainder=True).with_options(options)


def cpu_ms_per_sample(ds: tf.data.Dataset, batches: int) -> float:
    it = iter(ds)
    for _ in range(25):  # warm-up: thread pools, the file cache
        next(it)
    c0 = time.process_time()
    for _ in range(batches):
        next(it)
    return 1e3 * (time.process_time() - c0) / (batches * 50)


def make_tfrecords(root: str, out: Path) -> None:
    files, classes = pipeline.list_image_folder(root)
    out.mkdir(parents=True, exist_ok=True)
    for k in range(4):
        with tf.io.TFRecordWriter(str(out / f"train-{k}.tfrecord")) as w:
            for f in files[k::4]:
                feature = {
                    "image/encoded": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[Path(f).read_bytes()])
                    ),
                    "image/class/label": tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[classes.index(Path(f).parent.name)])
                    ),
                }
                w.write(
                    tf.train.Example(
                        features=tf.train.Features(feature=feature)
                    ).SerializeToString()
                )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", choices=["folder", "tfrecord"], default="folder")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, then check the figures (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds, args.batches, args.images = 1, 4, 100
    for source in ("folder", "tfrecord") if args.smoke else (args.source,):
        figures = measure(source, args.images, args.rounds, args.batches)
        if args.smoke:
            harness.smoke_check(
                all(harness.finite_positive(v) for v in figures), f"{source}: costs {figures}"
            )
    return 0


def measure(source: str, images: int, rounds: int, batches: int) -> tuple[float, float, float]:
    """Print and return the checked and unchecked costs (CPU-ms a sample) and their ratio."""
    with tempfile.TemporaryDirectory(prefix="pipeprof-bench-") as tmp:
        root = str(
            generate(
                GenerateConfig(images=images, size=96, classes=10, seed=3), Path(tmp) / "images"
            )
        )
        data = DataConfig(source="folder", image_size=SIZE, num_classes=10)
        if source == "tfrecord":
            make_tfrecords(root, Path(tmp) / "records")
            data = DataConfig(
                source="tfrecord", path=str(Path(tmp) / "records"), image_size=SIZE, num_classes=10
            )
        got = harness.in_rounds(  # unchecked first in even rounds, checked first in odd ones
            rounds,
            {
                "unchecked": lambda: cpu_ms_per_sample(unchecked(data, root), batches),
                "checked": lambda: cpu_ms_per_sample(
                    pipeline.build(
                        data, PIPE, data_root=root, shard=pipeline.Shard(0, 1), batch_size=50
                    ),
                    batches,
                ),
            },
        )
    ratios = sorted(c / u for c, u in zip(got["checked"], got["unchecked"]))
    c, u = statistics.median(got["checked"]), statistics.median(got["unchecked"])
    ratio = statistics.median(ratios)
    print(
        f"{source}: checked {c:.4f}, unchecked {u:.4f} CPU-ms/sample (medians, {rounds} rounds); "
        f"ratio checked/unchecked {ratio:.3f} (rounds {ratios[0]:.3f}..{ratios[-1]:.3f}); "
        f"{1e3 * (c - u):+.1f} µs per sample"
    )
    return c, u, ratio


if __name__ == "__main__":
    harness.entry(main)
