"""Bad files at the pipeline level, on real files: the real tf.data pipeline skips and counts
what the checks find (image folders and TFRecords), never decodes it, and with
data.on_bad_file = "fail" stops at the first one, named."""

import os
import struct
from pathlib import Path

import pytest
import tensorflow as tf

from pipeprof.data import badfiles, pipeline
from pipeprof.data.badfiles import BadFiles
from pipeprof.errors import PipeprofError
from pipeprof.scenario import AugmentConfig, DataConfig, PipelineConfig, ShuffleConfig

PIPE = PipelineConfig(augment=AugmentConfig(enabled=False), shuffle=ShuffleConfig(enabled=False))


def jpeg(seed: int) -> bytes:
    pixels = tf.cast(
        tf.random.stateless_uniform([24, 24, 3], [seed, 7], 0, 255, tf.int32), tf.uint8
    )
    return tf.io.encode_jpeg(pixels).numpy()


def example(image: bytes, label: int, name: str) -> bytes:
    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[name.encode()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """Three TFRecord files of 7 records: one record holds a truncated JPEG, one a label
    outside the classes, and one file has a corrupted record (its data fails its checksum)."""
    root = tmp_path_factory.mktemp("records")
    for k in range(3):
        with tf.io.TFRecordWriter(str(root / f"train-{k}.tfrecord")) as w:
            for i in range(7):
                image, label = jpeg(10 * k + i), i % 2
                if (k, i) == (0, 3):
                    image = image[: len(image) // 2]
                if (k, i) == (2, 6):
                    label = 5
                w.write(example(image, label, f"img-{k}-{i}.jpg"))
    raw = bytearray((root / "train-1.tfrecord").read_bytes())
    offset = 0
    for _ in range(4):  # to record 4, then flip a byte of its data
        (length,) = struct.unpack("<Q", raw[offset : offset + 8])
        offset += 12 + length + 4
    raw[offset + 12 + 30] ^= 0xFF
    (root / "train-1.tfrecord").write_bytes(bytes(raw))
    return root


def samples(ds) -> int:
    return sum(int(x.shape[0]) for x, _ in ds)


def test_bad_records_are_skipped_counted_and_named(records):
    sink = BadFiles(variant="real")
    data = DataConfig(source="tfrecord", path=str(records), image_size=24, num_classes=2)
    ds = pipeline.build(
        data,
        PIPE,
        data_root=str(records),
        shard=pipeline.Shard(0, 1),
        batch_size=1,
        epochs=2,
        bad_files=sink,
    )
    # 21 records: 2 bad ones, and the corrupt file's records 4..6 are lost with its rest
    assert samples(ds) == 2 * (21 - 2 - 3)
    found = dict(sink.items())
    assert len(found) == 3
    assert found[f"{records}/train-0.tfrecord[3]"].startswith(
        "image/filename img-0-3.jpg: truncated JPEG"
    )
    assert "image/class/label 5" in found[f"{records}/train-2.tfrecord[6]"]
    assert found[f"{records}/train-1.tfrecord"].startswith("corrupt or truncated after record 3")


def test_every_rank_skips_its_own_bad_records(records):
    data = DataConfig(source="tfrecord", path=str(records), image_size=24, num_classes=2)
    total = 0
    for r in range(4):  # more ranks than files: every rank reads all and keeps its records
        ds = pipeline.build(
            data, PIPE, data_root=str(records), shard=pipeline.Shard(r, 4), batch_size=1, epochs=1
        )
        total += samples(ds)
    assert total == 21 - 2 - 3


def test_a_bad_record_fails_the_pipeline_when_asked(records):
    data = DataConfig(
        source="tfrecord", path=str(records), image_size=24, num_classes=2, on_bad_file="fail"
    )
    ds = pipeline.build(
        data,
        PIPE,
        data_root=str(records),
        shard=pipeline.Shard(0, 1),
        batch_size=1,
        epochs=1,
        bad_files=BadFiles(variant="real"),
    )
    with pytest.raises(tf.errors.OpError) as exc:
        samples(ds)
    line = badfiles.failure_line(exc.value)
    assert line.startswith("variant real: bad file ") and "train-" in line and "\n" not in line


def test_folder_pipeline_drops_bad_files_before_batching(tmp_path):
    root = tmp_path / "images"
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(5):
            (root / c / f"{i}.jpg").write_bytes(jpeg(i))
    (root / "a" / "cut.jpg").write_bytes(jpeg(1)[:200])
    (root / "b" / "empty.png").write_bytes(b"")
    os.symlink(tmp_path / "gone.jpg", root / "b" / "dangling.jpg")
    sink = BadFiles(tmp_path / "log.jsonl", variant="real")
    data = DataConfig(source="folder", image_size=24, num_classes=2)
    ds = pipeline.build(
        data,
        PIPE,
        data_root=str(root),
        shard=pipeline.Shard(0, 1),
        batch_size=3,
        epochs=3,
        bad_files=sink,
    )
    assert [int(x.shape[0]) for x, _ in ds] == [
        3
    ] * 10  # 10 good files × 3 epochs, every batch full
    assert sorted(Path(p).name for p, _ in sink.items()) == ["cut.jpg", "dangling.jpg", "empty.png"]
    assert (
        len((tmp_path / "log.jsonl").read_text().splitlines()) == 3
    )  # each file once, not once per epoch
    with pytest.raises(PipeprofError, match="dangling.jpg: unreadable"):  # refused while building
        pipeline.build(
            DataConfig(source="folder", image_size=24, num_classes=2, on_bad_file="fail"),
            PIPE,
            data_root=str(root),
            shard=pipeline.Shard(0, 1),
            batch_size=3,
        )


@pytest.mark.horovod
def test_compare_trains_from_tfrecords_and_counts_their_bad_records(records, tmp_path):
    """A TFRecord source through `compare --np 1,2` (ImageNet layout, labels from 0): every
    (np, variant) measured from the records, each rank's batches full, and the three bad
    records the pipeline skipped counted in the real rows and listed."""
    from tests.integration.conftest import run_pipeprof

    scenario = tmp_path / "records.toml"
    scenario.write_text(
        f"""
name = "records"
[data]
source = "tfrecord"
path = "{records}"
image_size = 24
num_classes = 2
[pipeline.augment]
enabled = false
[pipeline.shuffle]
buffer_size = 16
[train]
batch_size = 4
warmup_steps = 3
measure_steps = 30
device = "emulated:5"
"""
    )
    out = tmp_path / "run"
    run_pipeprof(
        "compare", str(scenario), "--np", "1,2", "--out", str(out), "--no-report",
        "--no-dashboard",
    )  # fmt: skip
    import pandas as pd

    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ]  # fmt: skip
    real = summary[summary["variant"] == "real"].set_index("np")
    assert real["samples_per_s"].gt(0).all() and list(real["bad_files"]) == [3, 3], real
    steps = pd.read_csv(out / "steps" / "np2-real.csv")
    assert set(steps["rank"]) == {0, 1} and set(steps["batch_size"]) == {4}
    listed = pd.read_csv(out / "bad_files.csv")
    assert {p.rsplit("/", 1)[-1] for p in listed["path"]} == {
        "train-0.tfrecord[3]", "train-1.tfrecord", "train-2.tfrecord[6]",
    }  # fmt: skip
