"""The real tf.data pipeline on real files: stages, shards, sources, the synthetic twin."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipeprof.data import generate as gen
from pipeprof.data import pipeline
from pipeprof.errors import PipeprofError
from pipeprof.scenario import (AugmentConfig, CacheConfig, DataConfig, PipelineConfig, PrefetchConfig,
                               ShuffleConfig, StageSwitch)


def data_cfg(cfg, **kw):
    return DataConfig(source="folder", image_size=32, num_classes=cfg.classes, **kw)


def one_epoch_ids(root, cfg, pipe, shard, batch=5):
    ds = pipeline.build(data_cfg(cfg), pipe, data_root=str(root), shard=shard, batch_size=batch, epochs=1,
                        with_ids=True)
    ids, labels = [], []
    for _, y, p in ds:
        ids += [x.decode() for x in p.numpy()]
        labels += list(y.numpy())
    return ids, labels


def test_generator_is_deterministic_and_learnable_shaped(small_dataset):
    root, cfg = small_dataset
    files, classes = pipeline.list_image_folder(root)
    assert len(files) == 90 and classes == ["class_000", "class_001", "class_002"]
    a, la = gen.render(cfg, 7)
    b, lb = gen.render(cfg, 7)
    assert la == lb == 7 % 3 and np.array_equal(a, b) and a.shape == (48, 48, 3)
    assert gen.is_complete(root, cfg)
    assert gen.generate(cfg, root) == root  # second call: nothing to do


def test_ranks_see_disjoint_shards_that_cover_the_data(small_dataset):
    root, cfg = small_dataset
    pipe = PipelineConfig(augment=AugmentConfig(enabled=False))
    seen = [one_epoch_ids(root, cfg, pipe, pipeline.Shard(r, 3), batch=1)[0] for r in range(3)]
    sets = [set(s) for s in seen]
    assert all(len(s) == len(ids) for s, ids in zip(sets, seen))  # no repeats within a rank
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert set().union(*sets) == set(pipeline.list_image_folder(root)[0])


def test_labels_come_from_the_folder(small_dataset):
    root, cfg = small_dataset
    ids, labels = one_epoch_ids(root, cfg, PipelineConfig(augment=AugmentConfig(enabled=False)), pipeline.Shard(0, 1))
    for path, label in zip(ids, labels):
        assert Path(path).parent.name == f"class_{label:03d}"
    _, off = one_epoch_ids(root, cfg, PipelineConfig(label=StageSwitch(False), augment=AugmentConfig(enabled=False)),
                           pipeline.Shard(0, 1))
    assert set(off) == {0}


def test_shuffle_before_shard_mixes_classes_per_batch(small_dataset):
    root, cfg = small_dataset
    # everything off and a deterministic order: file order (parallel maps may reorder otherwise)
    sorted_pipe = PipelineConfig(shuffle=ShuffleConfig(enabled=False), augment=AugmentConfig(enabled=False),
                                 deterministic=True)
    ids, _ = one_epoch_ids(root, cfg, sorted_pipe, pipeline.Shard(0, 1))
    assert ids == sorted(ids)
    mixed, _ = one_epoch_ids(root, cfg, PipelineConfig(augment=AugmentConfig(enabled=False)), pipeline.Shard(0, 1))
    assert mixed != ids and sorted(mixed) == ids


def test_every_stage_switch_builds_and_yields_the_same_spec(small_dataset, tmp_path):
    root, cfg = small_dataset
    variants = [
        PipelineConfig(),
        PipelineConfig(shuffle=ShuffleConfig(enabled=False), prefetch=PrefetchConfig(enabled=False)),
        PipelineConfig(cache=CacheConfig(enabled=True)),
        PipelineConfig(cache=CacheConfig(enabled=True, kind="file", path=str(tmp_path / "c"))),
        PipelineConfig(cache=CacheConfig(enabled=True, placement="after_augment")),
        PipelineConfig(parallel_calls=2, prefetch=PrefetchConfig(depth=3), private_threadpool_size=2,
                       max_intra_op_parallelism=1, deterministic=True),
    ]
    for pipe in variants:
        ds = pipeline.build(data_cfg(cfg), pipe, data_root=str(root), shard=pipeline.Shard(0, 1), batch_size=8)
        x, y = next(iter(ds))
        assert x.shape == (8, 32, 32, 3) and x.dtype == tf.float32 and y.dtype == tf.int32
        assert 0.0 <= float(tf.reduce_min(x)) and float(tf.reduce_max(x)) <= 1.0
    assert list(tmp_path.glob("c-shard0of1*"))  # the file cache was written


def test_augmentation_changes_images_and_strength_zero_does_not(small_dataset):
    root, cfg = small_dataset
    img = tf.image.resize(tf.io.decode_jpeg(tf.io.read_file(pipeline.list_image_folder(root)[0][0])), [32, 32]) / 255
    aug = pipeline.make_augment(AugmentConfig(rotation_deg=40.0), 32)
    out, _ = aug(img, 0)
    assert out.shape == (32, 32, 3) and float(tf.reduce_mean(tf.abs(out - img))) > 0.01
    same, _ = pipeline.make_augment(AugmentConfig(strength=0.0, flip=False), 32)(img, 0)
    assert np.allclose(same.numpy(), img.numpy(), atol=1e-5)


def test_tfrecord_source_in_imagenet_layout(small_dataset, tmp_path):
    root, cfg = small_dataset
    files, classes = pipeline.list_image_folder(root)
    for shard in range(2):
        with tf.io.TFRecordWriter(str(tmp_path / f"train-{shard:05d}-of-00002")) as w:
            for f in files[shard::2]:
                label = classes.index(Path(f).parent.name) + 1  # ImageNet counts from 1
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[Path(f).read_bytes()])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }))
                w.write(ex.SerializeToString())
    data = DataConfig(source="tfrecord", path=str(tmp_path), image_size=32, num_classes=3, label_offset=1)
    pipe = PipelineConfig(augment=AugmentConfig(enabled=False), shuffle=ShuffleConfig(enabled=False))
    labels = []
    for r in range(2):
        ds = pipeline.build(data, pipe, data_root="", shard=pipeline.Shard(r, 2), batch_size=5, epochs=1)
        labels += [int(v) for _, y in ds for v in y.numpy()]
    assert len(labels) == 90 and set(labels) == {0, 1, 2}


def test_factory_source(tmp_path, monkeypatch):
    (tmp_path / "my_data.py").write_text(
        "import tensorflow as tf\n"
        "def make(shard, shards, size, classes):\n"
        "    x = tf.random.uniform([40, size, size, 3])\n"
        "    y = tf.range(40, dtype=tf.int32) % classes\n"
        "    return tf.data.Dataset.from_tensor_slices((x, y)).shard(shards, shard)\n")
    monkeypatch.chdir(tmp_path)
    data = DataConfig(source="factory", factory="my_data:make", image_size=16, num_classes=4)
    ds = pipeline.build(data, PipelineConfig(augment=AugmentConfig(enabled=False)), data_root="",
                        shard=pipeline.Shard(1, 2), batch_size=4, epochs=1)
    assert sum(int(y.shape[0]) for _, y in ds) == 20


def test_missing_folder_and_empty_folder_are_one_line_errors(tmp_path):
    with pytest.raises(PipeprofError, match="does not exist"):
        pipeline.list_image_folder(tmp_path / "nope")
    (tmp_path / "a").mkdir()
    with pytest.raises(PipeprofError, match="no .jpg"):
        pipeline.list_image_folder(tmp_path)


def test_synthetic_twin_matches_the_real_element_spec(small_dataset):
    root, cfg = small_dataset
    ds = pipeline.build(data_cfg(cfg), PipelineConfig(), data_root=str(root), shard=pipeline.Shard(0, 1), batch_size=8)
    x, y = pipeline.synthetic_batch(ds.element_spec, num_classes=3)
    assert x.shape == ds.element_spec[0].shape and x.dtype == ds.element_spec[0].dtype
    assert y.shape == ds.element_spec[1].shape and y.dtype == ds.element_spec[1].dtype
    assert set(y.numpy()) <= {0, 1, 2}
