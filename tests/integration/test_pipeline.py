"""The real tf.data pipeline on real files: stages, shards, sources, the synthetic twin."""

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipeprof.analysis.ablation import ladder
from pipeprof.data import generate as gen
from pipeprof.data import pipeline
from pipeprof.errors import PipeprofError
from pipeprof.scenario import (
    AugmentConfig,
    CacheConfig,
    DataConfig,
    MapConfig,
    PipelineConfig,
    PrefetchConfig,
    ReadConfig,
    ShuffleConfig,
    StageSwitch,
)


def data_cfg(cfg, **kw):
    return DataConfig(source="folder", image_size=32, num_classes=cfg.classes, **kw)


def one_epoch_ids(root, cfg, pipe, shard, batch=5):
    ds = pipeline.build(
        data_cfg(cfg),
        pipe,
        data_root=str(root),
        shard=shard,
        batch_size=batch,
        epochs=1,
        with_ids=True,
    )
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
    ids, labels = one_epoch_ids(
        root, cfg, PipelineConfig(augment=AugmentConfig(enabled=False)), pipeline.Shard(0, 1)
    )
    for path, label in zip(ids, labels):
        assert Path(path).parent.name == f"class_{label:03d}"
    _, off = one_epoch_ids(
        root,
        cfg,
        PipelineConfig(label=StageSwitch(False), augment=AugmentConfig(enabled=False)),
        pipeline.Shard(0, 1),
    )
    assert set(off) == {0}


def test_shuffle_before_shard_mixes_classes_per_batch(small_dataset):
    root, cfg = small_dataset
    # everything off and a deterministic order: file order (parallel maps may reorder otherwise)
    sorted_pipe = PipelineConfig(
        shuffle=ShuffleConfig(enabled=False),
        augment=AugmentConfig(enabled=False),
        deterministic=True,
    )
    ids, _ = one_epoch_ids(root, cfg, sorted_pipe, pipeline.Shard(0, 1))
    assert ids == sorted(ids)
    mixed, _ = one_epoch_ids(
        root, cfg, PipelineConfig(augment=AugmentConfig(enabled=False)), pipeline.Shard(0, 1)
    )
    assert mixed != ids and sorted(mixed) == ids


def test_every_stage_switch_builds_and_yields_the_same_spec(small_dataset, tmp_path):
    root, cfg = small_dataset
    variants = [
        PipelineConfig(),
        PipelineConfig(
            shuffle=ShuffleConfig(enabled=False), prefetch=PrefetchConfig(enabled=False)
        ),
        PipelineConfig(cache=CacheConfig(enabled=True)),
        PipelineConfig(cache=CacheConfig(enabled=True, kind="file", path=str(tmp_path / "c"))),
        PipelineConfig(cache=CacheConfig(enabled=True, placement="after_augment")),
        PipelineConfig(
            parallel_calls=2,
            prefetch=PrefetchConfig(depth=3),
            private_threadpool_size=2,
            max_intra_op_parallelism=1,
            deterministic=True,
        ),
        PipelineConfig(read=ReadConfig(decode="reduced")),
    ]
    for pipe in variants:
        ds = pipeline.build(
            data_cfg(cfg), pipe, data_root=str(root), shard=pipeline.Shard(0, 1), batch_size=8
        )
        x, y = next(iter(ds))
        assert x.shape == (8, 32, 32, 3) and x.dtype == tf.float32 and y.dtype == tf.int32
        assert float(tf.reduce_min(x)) >= 0.0 and float(tf.reduce_max(x)) <= 1.0
    assert list(tmp_path.glob("c-shard0of1*"))  # the file cache was written


def test_a_reduced_decode_picks_the_largest_dct_scale_that_keeps_the_models_size():
    smooth = tf.image.resize(tf.random.stateless_uniform([1, 8, 8, 3], seed=[1, 2]), [200, 256])[0]
    jpeg = tf.io.encode_jpeg(tf.cast(smooth * 255, tf.uint8), quality=95)
    # short side 200: 1/8 would give 25 px, under 32; 1/4 gives 50 x 64
    assert pipeline._decode_jpeg_reduced(jpeg, 32).shape == (50, 64, 3)
    assert pipeline._decode_jpeg_reduced(jpeg, 20).shape == (25, 32, 3)  # 1/8
    assert pipeline._decode_jpeg_reduced(jpeg, 150).shape == (
        200,
        256,
        3,
    )  # whole: 1/2 would be 100
    full, reduced = pipeline._decode(jpeg, 32), pipeline._decode(jpeg, 32, reduced=True)
    assert full.shape == reduced.shape == (32, 32, 3)
    assert (
        float(tf.reduce_mean(tf.abs(full - reduced))) < 0.02
    )  # the same picture at the model's size
    png = tf.io.encode_png(tf.cast(smooth * 255, tf.uint8))  # not a JPEG: decoded whole, as before
    assert np.allclose(
        pipeline._decode(png, 32, reduced=True).numpy(), pipeline._decode(png, 32).numpy()
    )


def test_augmentation_changes_images_and_strength_zero_does_not(small_dataset):
    root, cfg = small_dataset
    img = (
        tf.image.resize(
            tf.io.decode_jpeg(tf.io.read_file(pipeline.list_image_folder(root)[0][0])), [32, 32]
        )
        / 255
    )
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
                ex = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image/encoded": tf.train.Feature(
                                bytes_list=tf.train.BytesList(value=[Path(f).read_bytes()])
                            ),
                            "image/class/label": tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[label])
                            ),
                        }
                    )
                )
                w.write(ex.SerializeToString())
    data = DataConfig(
        source="tfrecord", path=str(tmp_path), image_size=32, num_classes=3, label_offset=1
    )
    pipe = PipelineConfig(
        augment=AugmentConfig(enabled=False), shuffle=ShuffleConfig(enabled=False)
    )
    labels = []
    for r in range(2):
        ds = pipeline.build(
            data, pipe, data_root="", shard=pipeline.Shard(r, 2), batch_size=5, epochs=1
        )
        labels += [int(v) for _, y in ds for v in y.numpy()]
    assert len(labels) == 90 and set(labels) == {0, 1, 2}


def test_factory_source(tmp_path, monkeypatch):
    (tmp_path / "my_data.py").write_text(
        "import tensorflow as tf\n"
        "def make(shard, shards, size, classes):\n"
        "    x = tf.random.uniform([40, size, size, 3])\n"
        "    y = tf.range(40, dtype=tf.int32) % classes\n"
        "    return tf.data.Dataset.from_tensor_slices((x, y)).shard(shards, shard)\n"
    )
    monkeypatch.chdir(tmp_path)
    data = DataConfig(source="factory", factory="my_data:make", image_size=16, num_classes=4)
    ds = pipeline.build(
        data,
        PipelineConfig(augment=AugmentConfig(enabled=False)),
        data_root="",
        shard=pipeline.Shard(1, 2),
        batch_size=4,
        epochs=1,
    )
    assert sum(int(y.shape[0]) for _, y in ds) == 20


def test_a_map_of_ones_own_transforms_every_element_and_is_a_rung_of_the_ladder(
    small_dataset, tmp_path, monkeypatch
):
    root, cfg = small_dataset
    (tmp_path / "my_map.py").write_text(
        "def blank(offset):\n"
        "    def fn(image, label):\n"
        "        return image * 0.0, label + offset\n"
        "    return fn\n"
    )
    monkeypatch.chdir(tmp_path)
    pipe = PipelineConfig(
        augment=AugmentConfig(enabled=False), map=MapConfig("my_map:blank", {"offset": 100})
    )
    ids, labels = one_epoch_ids(root, cfg, pipe, pipeline.Shard(0, 1))
    assert len(ids) == 90 and all(
        100 <= y < 100 + cfg.classes for y in labels
    )  # ids pass through the map
    ds = pipeline.build(
        data_cfg(cfg), pipe, data_root=str(root), shard=pipeline.Shard(0, 1), batch_size=5, epochs=1
    )
    assert all(float(tf.reduce_max(x)) == 0.0 for x, _ in ds)
    assert [n for n, _ in ladder(pipe)] == [
        "read",
        "label",
        "shuffle",
        "map",
        "augment",
        "prefetch",
        "cache",
    ]
    assert "map" not in [n for n, _ in ladder(PipelineConfig())]  # no function: no rung
    wrong = dataclasses.replace(pipe, map=MapConfig("my_map:blank", {"offset": 1, "scale": 2}))
    with pytest.raises(
        PipeprofError, match="pipeline.map.kwargs: my_map:blank does not take them: .*'scale'"
    ):
        pipeline.build(
            data_cfg(cfg), wrong, data_root=str(root), shard=pipeline.Shard(0, 1), batch_size=5
        )
    bad = dataclasses.replace(pipe, map=MapConfig("my_map:nothing"))
    with pytest.raises(
        PipeprofError, match="pipeline.map.function: module 'my_map' has no function 'nothing'"
    ):
        pipeline.build(
            data_cfg(cfg), bad, data_root=str(root), shard=pipeline.Shard(0, 1), batch_size=5
        )


def test_a_storage_limit_reads_no_faster_than_its_rate(small_dataset):
    root, cfg = small_dataset
    files = pipeline.list_image_folder(root)[0]
    total = sum(Path(f).stat().st_size for f in files)
    rate = total / 1e6 / 0.5  # the whole epoch in 0.5 s at the limit
    pipe = PipelineConfig(
        augment=AugmentConfig(enabled=False), read=ReadConfig(throttle_mb_s=rate), parallel_calls=4
    )
    ds = pipeline.build(
        data_cfg(cfg),
        pipe,
        data_root=str(root),
        shard=pipeline.Shard(0, 1),
        batch_size=10,
        epochs=1,
    )
    t0 = time.perf_counter()
    assert sum(int(y.shape[0]) for _, y in ds) == 90
    # the storage serves one read at a time, at the rate: however many parallel reads ask
    assert time.perf_counter() - t0 >= 0.5 * 0.999


def test_missing_folder_and_empty_folder_are_one_line_errors(tmp_path):
    with pytest.raises(PipeprofError, match="does not exist"):
        pipeline.list_image_folder(tmp_path / "nope")
    (tmp_path / "a").mkdir()
    with pytest.raises(PipeprofError, match="no .jpg"):
        pipeline.list_image_folder(tmp_path)


def test_synthetic_twin_matches_the_real_element_spec(small_dataset):
    root, cfg = small_dataset
    ds = pipeline.build(
        data_cfg(cfg),
        PipelineConfig(),
        data_root=str(root),
        shard=pipeline.Shard(0, 1),
        batch_size=8,
    )
    x, y = pipeline.synthetic_batch(ds.element_spec, num_classes=3)
    assert x.shape == ds.element_spec[0].shape and x.dtype == ds.element_spec[0].dtype
    assert y.shape == ds.element_spec[1].shape and y.dtype == ds.element_spec[1].dtype
    assert set(y.numpy()) <= {0, 1, 2}


# --- augment.placement = "batch": the same random draws, per image, in vectorised ops ---

N, SIZE = 256, 32
RAMP = tf.tile(
    tf.reshape(tf.linspace(0.0, 1.0, SIZE), [1, SIZE, 1]), [SIZE, 1, 3]
)  # dark left, bright right
ONLY = dict(flip=False, rotation_deg=0.0, crop_scale_min=1.0, brightness=0.0, contrast=0.0)


def augmented(image, aug: AugmentConfig, placement: str) -> np.ndarray:
    """N augmented copies of ``image`` through a tf.data map, per element or per batch of 32."""
    tf.random.set_seed(7)
    ds = tf.data.Dataset.from_tensors((image, 0)).repeat(N)
    if placement == "element":
        ds = ds.map(pipeline.make_augment(aug, SIZE)).batch(32)
    else:
        ds = ds.batch(32).map(pipeline.make_batch_augment(aug, SIZE))
    return np.concatenate([x.numpy() for x, _ in ds])


def ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two CDFs."""
    grid = np.sort(np.concatenate([a, b]))
    return float(
        np.max(
            np.abs(
                np.searchsorted(np.sort(a), grid, "right") / len(a)
                - np.searchsorted(np.sort(b), grid, "right") / len(b)
            )
        )
    )


KS_001 = 1.95 * np.sqrt(2 / N)  # two equal samples of N: the 0.1% critical value


def centre_gradient_angle(images: np.ndarray) -> np.ndarray:
    c = images[:, SIZE // 2 - 4 : SIZE // 2 + 4, SIZE // 2 - 4 : SIZE // 2 + 4, 0]
    return np.degrees(
        np.arctan2(np.diff(c, axis=1).mean(axis=(1, 2)), np.diff(c, axis=2).mean(axis=(1, 2)))
    )


PARAMETERS = {
    # what each draw does to a known image, read back from the output
    "flip": (
        RAMP,
        dict(ONLY, flip=True),
        lambda out: (out[:, 0, 0, 0] > out[:, 0, -1, 0]).astype(float),
    ),
    "brightness": (
        tf.fill([SIZE, SIZE, 3], 0.5),
        dict(ONLY, brightness=0.2),
        lambda out: out.mean(axis=(1, 2, 3)) - 0.5,
    ),
    "contrast": (
        tf.concat(
            [tf.fill([SIZE, SIZE // 2, 3], 0.25), tf.fill([SIZE, SIZE // 2, 3], 0.75)], axis=1
        ),
        dict(ONLY, contrast=0.5),
        lambda out: out.std(axis=(1, 2, 3)) / 0.25,
    ),
    "crop side": (
        RAMP,
        dict(ONLY, crop_scale_min=0.3),
        lambda out: (out[:, :, -1, 0] - out[:, :, 0, 0]).mean(axis=1),
    ),
    "rotation": (RAMP, dict(ONLY, rotation_deg=30.0), centre_gradient_angle),
}


@pytest.mark.parametrize("parameter", PARAMETERS)
def test_batch_augmentation_draws_each_parameter_from_the_same_distribution_as_per_image(parameter):
    image, kw, read = PARAMETERS[parameter]
    per_image = read(augmented(image, AugmentConfig(**kw), "element"))
    per_batch = read(augmented(image, AugmentConfig(**kw), "batch"))
    assert (
        per_batch[:32].std() > 0.01
    )  # each image of a batch draws its own value, not one per batch
    if parameter == "flip":
        assert abs(per_image.mean() - 0.5) < 0.1 and abs(per_batch.mean() - 0.5) < 0.1
        return
    if (
        parameter == "crop side"
    ):  # resize and crop_and_resize sample a crop's pixels a little differently
        assert np.quantile(per_batch, [0.1, 0.5, 0.9]) == pytest.approx(
            np.quantile(per_image, [0.1, 0.5, 0.9]), abs=0.04
        )
        return
    assert ks(per_image, per_batch) < KS_001, (per_image.mean(), per_batch.mean())


def test_batch_augmentation_keeps_the_element_spec_and_refuses_a_cache_after_it(small_dataset):
    root, cfg = small_dataset
    batch = dataclasses.replace(PipelineConfig(), augment=AugmentConfig(placement="batch"))
    spec = pipeline.build(
        data_cfg(cfg), batch, data_root=str(root), shard=pipeline.Shard(0, 1), batch_size=4
    ).element_spec
    default = pipeline.build(
        data_cfg(cfg),
        PipelineConfig(),
        data_root=str(root),
        shard=pipeline.Shard(0, 1),
        batch_size=4,
    ).element_spec
    assert spec == default
    from pipeprof.scenario import _check_pipeline

    frozen = dataclasses.replace(batch, cache=CacheConfig(enabled=True, placement="after_augment"))
    with pytest.raises(PipeprofError, match="augment.placement"):
        _check_pipeline(frozen, "s.toml", "pipeline")
