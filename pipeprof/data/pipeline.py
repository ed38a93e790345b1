"""The real input pipeline, stage by stage, with tf.data.

Stages, in order: read (list, read, decode, resize) · label · cache · shuffle (file order and
an element buffer) · map (the scenario's own) · augment · prefetch, each switchable from the
scenario. The order
follows the tf.data performance guide: cache after decode and before augmentation (unless
the user asks otherwise, which freezes augmentation), repeat after cache, batch, then
prefetch last so it overlaps the whole pipeline with the training step.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from pipeprof.data import badfiles
from pipeprof.data.badfiles import BadFiles
from pipeprof.data.files import scan_image_folder
from pipeprof.data.magnitudes import Magnitudes
from pipeprof.data.screen import BadElements, read_files, tfrecord_elements
from pipeprof.data.storage import throttled
from pipeprof.errors import PipeprofError
from pipeprof.models import resolve_callable
from pipeprof.scenario import AugmentConfig, DataConfig, MapConfig, PipelineConfig


@dataclass(frozen=True)
class Shard:
    index: int
    count: int


def list_image_folder(root: str | Path) -> tuple[list[str], list[str]]:
    """Readable files of an image folder (one sub-folder per class), sorted; and the class names."""
    listing = scan_image_folder(root)
    return listing.files, listing.classes


def list_tfrecords(path: str) -> list[str]:
    return _tfrecord_files(path)[0]


def _tfrecord_files(path: str) -> tuple[list[str], list[int], list[tuple[str, str]]]:
    """The TFRecord files matching ``path`` (a folder or a glob): readable ones, their sizes,
    and the unreadable ones with their reason."""
    pattern = os.path.join(path, "*") if os.path.isdir(path) else path
    files: list[str] = []
    unreadable: list[str] = []
    for f in sorted(glob.glob(os.path.expanduser(pattern))):
        if os.path.isfile(f):
            (files if os.access(f, os.R_OK) else unreadable).append(f)
        elif os.path.islink(f):
            unreadable.append(f)
    if not files and not unreadable:
        raise PipeprofError(f"data.path: no TFRecord files match '{path}'")
    sizes = [os.path.getsize(f) for f in files]
    return (
        files,
        sizes,
        [
            (
                f,
                "unreadable: a link to nothing"
                if os.path.islink(f) and not os.path.exists(f)
                else "unreadable: permission denied",
            )
            for f in unreadable
        ],
    )


def _parallel(pipe: PipelineConfig) -> int:
    return tf.data.AUTOTUNE if pipe.parallel_calls == "autotune" else int(pipe.parallel_calls)


def _decode(encoded: tf.Tensor, size: int, reduced: bool = False) -> tf.Tensor:
    if reduced:
        img = tf.cond(
            tf.io.is_jpeg(encoded),
            lambda: _decode_jpeg_reduced(encoded, size),
            lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False),
        )
    else:
        img = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    img = tf.image.resize(img, [size, size], antialias=False)  # float32, 0..255
    img.set_shape([size, size, 3])
    return img / 255.0


REDUCED_RATIOS = (1, 2, 4, 8)  # what libjpeg's DCT scaling offers


def _decode_jpeg_reduced(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """A JPEG decoded at the largest 1/r scale whose short side stays at least ``size``: the
    DCT drops the detail a resize to ``size`` would throw away, before it is computed."""
    shape = tf.io.extract_jpeg_shape(encoded)
    side = tf.minimum(shape[0], shape[1])
    # the index of the largest ratio r with ceil(side / r) >= size
    index = tf.add_n([tf.cast((side + r - 1) // r >= size, tf.int32) for r in REDUCED_RATIOS[1:]])
    branches = [lambda r=r: tf.io.decode_jpeg(encoded, channels=3, ratio=r) for r in REDUCED_RATIOS]
    return tf.switch_case(index, branches)


def _folder_source(
    data: DataConfig,
    root: str,
    pipe: PipelineConfig,
    shard: Shard,
    with_ids: bool,
    bad: BadElements,
) -> tf.data.Dataset:
    listing = scan_image_folder(root)
    files, classes = listing.files, listing.classes
    if len(classes) != data.num_classes:
        raise PipeprofError(
            f"data.num_classes is {data.num_classes} but '{root}' has {len(classes)} class folders"
        )
    for path, why in listing.unreadable:
        bad.python(path, why)
    if not files:
        path, why = listing.unreadable[0]
        raise PipeprofError(
            f"data.path: none of the {len(listing.unreadable)} image files in '{root}' can be read "
            f"(first: {path}: {why})"
        )
    ds = _ordered_and_sharded(tf.data.Dataset.from_tensor_slices(files), len(files), pipe, shard)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(classes), tf.range(len(classes), dtype=tf.int32)
        ),
        -1,
    )
    size = data.image_size

    reduced = pipe.read.decode == "reduced"

    def decode_and_label(path: tf.Tensor, encoded: tf.Tensor):
        image = _decode(encoded, size, reduced)
        if pipe.label.enabled:  # the class comes from the path, as in most image-folder pipelines
            label = table.lookup(tf.strings.split(path, os.sep)[-2])
        else:
            label = tf.constant(0, tf.int32)
        return (image, label, path) if with_ids else (image, label)

    par, det = _parallel(pipe), pipe.deterministic or None
    ds = read_files(ds, bad, par, det)  # bad files are dropped here, before decoding
    if pipe.read.throttle_mb_s:
        ds = ds.map(
            throttled(pipe.read.throttle_mb_s, lambda path, encoded: encoded),
            num_parallel_calls=par,
            deterministic=det,
        )
    return ds.map(decode_and_label, num_parallel_calls=par, deterministic=det)


def epoch_elements(
    data: DataConfig, pipe: PipelineConfig, data_root: str, shard: Shard
) -> int | None:
    """At most how many elements one epoch of ``shard``'s pipeline yields (its files, bad ones
    not yet dropped), or None where that is not known without reading it (a TFRecord source,
    a factory's data set). The pipeline's own cardinality is unknown: bad files are filtered."""
    if data.source in ("tfrecord", "factory"):
        return None
    n = len(scan_image_folder(data_root).files)
    sharded = _ordered_and_sharded(tf.data.Dataset.range(n), n, pipe, shard)
    count = int(sharded.cardinality())
    return count if count >= 0 else None


def _tfrecord_source(
    data: DataConfig, pipe: PipelineConfig, shard: Shard, with_ids: bool, bad: BadElements
) -> tf.data.Dataset:
    files, sizes, unreadable = _tfrecord_files(data.path)
    for path, why in unreadable:
        bad.python(path, why)
    if not files:
        raise PipeprofError(
            f"data.path: none of the {len(unreadable)} TFRecord files matching '{data.path}' can "
            f"be read (first: {unreadable[0][0]}: {unreadable[0][1]})"
        )
    size = data.image_size
    par, det = _parallel(pipe), pipe.deterministic or None
    globless = [not any(c in f for c in "*?[\\") for f in files]
    sources = tf.data.Dataset.from_tensor_slices((files, tf.constant(sizes, tf.int64), globless))
    elements = tfrecord_elements(data, pipe.label.enabled, bad)  # bad records are dropped there
    if len(files) >= shard.count:  # shard by file: each rank reads only its own files
        ds = _ordered_and_sharded(sources, len(files), pipe, shard)
        ds = ds.interleave(
            elements, cycle_length=min(8, len(files)), num_parallel_calls=par, deterministic=det
        )
    else:  # fewer files than ranks: every rank reads all and keeps its records
        ds = sources.flat_map(elements).shard(shard.count, shard.index)

    if pipe.read.throttle_mb_s:
        ds = ds.map(
            throttled(pipe.read.throttle_mb_s, lambda encoded, label, record: encoded),
            num_parallel_calls=par,
            deterministic=det,
        )
    reduced = pipe.read.decode == "reduced"

    def decode(encoded, label, record):
        image = _decode(encoded, size, reduced)
        return (image, label, tf.strings.substr(record, 0, 64)) if with_ids else (image, label)

    return ds.map(decode, num_parallel_calls=par, deterministic=det)


def _ordered_and_sharded(
    ds: tf.data.Dataset, n: int, pipe: PipelineConfig, shard: Shard
) -> tf.data.Dataset:
    sh = pipe.shuffle
    if sh.enabled and sh.files_before_shard:
        # Same seed on every rank: every epoch all ranks agree on the order, so shards stay disjoint.
        ds = ds.shuffle(n, seed=sh.seed, reshuffle_each_iteration=True)
    ds = ds.shard(shard.count, shard.index)
    if sh.enabled and not sh.files_before_shard:
        ds = ds.shuffle(
            max(1, n // shard.count), seed=sh.seed + shard.index, reshuffle_each_iteration=True
        )
    return ds


def _rotation(angle: tf.Tensor, size: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """cos, sin and the x, y offsets of a rotation about a square image's centre (output ->
    input coordinates), elementwise over ``angle``."""
    cos, sin, last = tf.cos(angle), tf.sin(angle), float(size - 1)
    return (
        cos,
        sin,
        (last - (cos * last - sin * last)) / 2.0,
        (last - (sin * last + cos * last)) / 2.0,
    )


def _rotation_transform(angle: tf.Tensor, size: int) -> tf.Tensor:
    """Projective transform (output -> input coordinates) rotating one image about its centre."""
    cos, sin, x_off, y_off = _rotation(angle, size)
    return tf.reshape(tf.stack([cos, -sin, x_off, sin, cos, y_off, 0.0, 0.0]), [1, 8])


def make_augment(aug: AugmentConfig, size: int):
    """The per-image augmentation: flip, crop-and-resize, rotation, brightness, contrast."""
    m = Magnitudes.of(aug)

    def augment(image: tf.Tensor, label: tf.Tensor, *rest):
        if aug.flip:
            image = tf.image.random_flip_left_right(image)
        if m.min_area < 1.0:
            side = tf.sqrt(tf.random.uniform([], m.min_area, 1.0))
            crop = tf.cast(tf.round(side * size), tf.int32)
            image = tf.image.random_crop(image, tf.stack([crop, crop, 3]))
            image = tf.image.resize(image, [size, size])
        if m.max_angle > 0:
            angle = tf.random.uniform([], -m.max_angle, m.max_angle)
            image = tf.raw_ops.ImageProjectiveTransformV3(
                images=image[None],
                transforms=_rotation_transform(angle, size),
                output_shape=tf.constant([size, size]),
                fill_value=0.0,
                interpolation="BILINEAR",
                fill_mode="REFLECT",
            )[0]
        if m.brightness > 0:
            image = tf.image.random_brightness(image, m.brightness)
        if m.contrast > 0:
            image = tf.image.random_contrast(image, 1.0 - m.contrast, 1.0 + m.contrast)
        image = tf.clip_by_value(image, 0.0, 1.0)
        image.set_shape([size, size, 3])
        return (image, label, *rest)

    return augment


def make_batch_augment(aug: AugmentConfig, size: int):
    """The same augmentation on a whole batch [B, H, W, 3] at once (``augment.placement =
    "batch"`` or ``"device"``): every image draws its own flip, crop, angle, brightness and
    contrast from the same ranges as ``make_augment``, in vectorised ops instead of one map
    call per image. Flip, crop-and-resize and rotation are one affine map per image, so the
    batch is resampled once (the per-image path resamples twice: resize, then rotate); a
    rotated corner reflects the image around the crop rather than the crop itself."""
    m = Magnitudes.of(aug)
    last = float(size - 1)

    def augment(images: tf.Tensor, labels: tf.Tensor, *rest):
        shape, n = images.shape, tf.shape(images)[0]
        zeros, ones = tf.zeros([n]), tf.ones([n])
        # output pixel (x, y) -> rotated about the centre -> scaled into the crop -> flipped
        angle = tf.random.uniform([n], -m.max_angle, m.max_angle) if m.max_angle > 0 else zeros
        cos, sin, x_off, y_off = _rotation(angle, size)
        if m.min_area < 1.0:
            crop = tf.round(
                tf.sqrt(tf.random.uniform([n], m.min_area, 1.0)) * size
            )  # pixels, as random_crop takes them
            top = tf.floor(tf.random.uniform([n]) * (size - crop + 1))
            left = tf.floor(tf.random.uniform([n]) * (size - crop + 1))
            scale = (crop - 1.0) / last
        else:
            top, left, scale = zeros, zeros, ones
        a = [scale * cos, -scale * sin, left + scale * x_off]
        b = [scale * sin, scale * cos, top + scale * y_off]
        if aug.flip:
            sign = tf.where(tf.random.uniform([n]) < 0.5, -1.0, 1.0)  # -1: x -> (size - 1) - x
            a = [sign * a[0], sign * a[1], tf.where(sign < 0, last - a[2], a[2])]
        if aug.flip or m.min_area < 1.0 or m.max_angle > 0:
            transforms = tf.stack(a + b + [zeros, zeros], axis=1)
            images = tf.raw_ops.ImageProjectiveTransformV3(
                images=images,
                transforms=transforms,
                output_shape=tf.constant([size, size]),
                fill_value=0.0,
                interpolation="BILINEAR",
                fill_mode="REFLECT",
            )
        if m.brightness > 0:
            images = images + tf.random.uniform([n, 1, 1, 1], -m.brightness, m.brightness)
        if m.contrast > 0:
            factor = tf.random.uniform([n, 1, 1, 1], 1.0 - m.contrast, 1.0 + m.contrast)
            mean = tf.reduce_mean(images, axis=[1, 2], keepdims=True)
            images = (images - mean) * factor + mean
        images = tf.clip_by_value(images, 0.0, 1.0)
        images.set_shape(shape)  # the batch keeps its static shape: the synthetic twin copies it
        return (images, labels, *rest)

    return augment


def user_map(cfg: MapConfig):
    """The scenario's own transformation (``pipeline.map``), applied to (image, label) and
    passing any further parts of an element (its id) through."""
    try:
        fn = resolve_callable(cfg.function, "pipeline.map.function")(**cfg.kwargs)
    except TypeError as exc:
        raise PipeprofError(
            f"pipeline.map.kwargs: {cfg.function} does not take them: {exc}"
        ) from None
    if not callable(fn):
        raise PipeprofError(
            f"pipeline.map.function {cfg.function} returned {type(fn).__name__}, not a map function"
        )

    def apply(image, label, *rest):
        out = fn(image, label)
        if not isinstance(out, tuple) or len(out) != 2:
            raise PipeprofError(
                f"pipeline.map.function {cfg.function}: its map function must return (image, label)"
            )
        return (*out, *rest)

    return apply


def build(
    data: DataConfig,
    pipe: PipelineConfig,
    *,
    data_root: str,
    shard: Shard,
    batch_size: int,
    cache_prefix: str = "",
    epochs: int | None = None,
    with_ids: bool = False,
    bad_files: BadFiles | None = None,
    service: str = "",
) -> tf.data.Dataset:
    """The real pipeline for one rank: batched (image float32 [B,H,W,3], label int32 [B]).

    Bad files (``data.check``) are skipped and handed to ``bad_files`` (None: counted in a
    sink nobody reads, for the stage benchmark and tune, which own no run directory), or end
    the pipeline with the first one named when ``data.on_bad_file = "fail"``.

    ``service``: the "host:port" of a tf.data service dispatcher: the pipeline up to its batches
    runs on the service's workers and the rank prefetches what they send; bad files are then
    named in the workers' logs (``screen.REMOTE_TAG``) and collected from there."""
    sink = bad_files if bad_files is not None else BadFiles()
    badfiles.building(sink.variant)
    bad = BadElements(
        sink,
        fail=data.on_bad_file == "fail",
        remote=f"{sink.variant}\t{shard.index}" if service else "",
    )
    if data.source == "factory":
        fn = resolve_callable(data.factory, "data.factory")
        ds = fn(shard.index, shard.count, data.image_size, data.num_classes)
        if not isinstance(ds, tf.data.Dataset):
            raise PipeprofError(
                f"data.factory {data.factory} returned {type(ds).__name__}, not a tf.data.Dataset"
            )
    elif data.source == "tfrecord":
        ds = _tfrecord_source(data, pipe, shard, with_ids, bad)
    else:
        ds = _folder_source(data, data_root, pipe, shard, with_ids, bad)

    def cache(d: tf.data.Dataset) -> tf.data.Dataset:
        if pipe.cache.kind == "file":
            prefix = pipe.cache.path or cache_prefix
            if not prefix:
                raise PipeprofError(
                    "pipeline.cache.path is required for a file cache outside a run"
                )
            Path(prefix).parent.mkdir(parents=True, exist_ok=True)
            return d.cache(f"{prefix}-shard{shard.index}of{shard.count}")
        return d.cache()

    cache_on = pipe.cache.enabled
    augment_on = pipe.augment.enabled
    if cache_on and pipe.cache.placement == "before_augment":
        ds = cache(ds)
    if pipe.shuffle.enabled:
        ds = ds.shuffle(
            pipe.shuffle.buffer_size,
            seed=pipe.shuffle.seed + shard.index,
            reshuffle_each_iteration=True,
        )
    if pipe.map.function:
        ds = ds.map(
            user_map(pipe.map),
            num_parallel_calls=_parallel(pipe),
            deterministic=pipe.deterministic or None,
        )
    augment_fn = make_augment(pipe.augment, data.image_size)
    if augment_on and cache_on and pipe.cache.placement == "after_augment":
        ds = cache(
            ds.map(
                augment_fn,
                num_parallel_calls=_parallel(pipe),
                deterministic=pipe.deterministic or None,
            )
        )
        augment_on = False
    elif cache_on and pipe.cache.placement == "after_augment":
        ds = cache(ds)
    ds = ds.repeat(epochs)
    if pipe.augment.placement == "device":
        augment_on = False  # the rank's training step augments the batch (device_augment)
    per_batch = pipe.augment.placement == "batch"
    if augment_on and not per_batch:
        ds = ds.map(
            augment_fn, num_parallel_calls=_parallel(pipe), deterministic=pipe.deterministic or None
        )
    ds = ds.batch(batch_size, drop_remainder=True)
    if augment_on and per_batch:
        ds = ds.map(
            make_batch_augment(pipe.augment, data.image_size),
            num_parallel_calls=_parallel(pipe),
            deterministic=pipe.deterministic or None,
        )
    options = tf.data.Options()
    options.deterministic = pipe.deterministic
    if pipe.private_threadpool_size:
        options.threading.private_threadpool_size = pipe.private_threadpool_size
    if pipe.max_intra_op_parallelism:
        options.threading.max_intra_op_parallelism = pipe.max_intra_op_parallelism
    if service:  # the options travel with the graph to the workers; the rank keeps the prefetch
        from pipeprof.data.tfdata_service import distribute

        ds = distribute(ds.with_options(options), service, pipe.service.compression)
    if pipe.prefetch.enabled:
        ds = ds.prefetch(
            tf.data.AUTOTUNE if pipe.prefetch.depth == "autotune" else int(pipe.prefetch.depth)
        )
    return ds.with_options(options)


def synthetic_batch(element_spec, num_classes: int, seed: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """Random noise shaped exactly like one batch of the real pipeline, made once.

    Created on the rank's default device (its GPU when there is one) and reused every step,
    so the synthetic variant costs no input work at all: the ceiling, as in Horovod's
    synthetic benchmark.
    """
    image_spec, label_spec = element_spec[0], element_spec[1]
    if not image_spec.shape.is_fully_defined():
        raise PipeprofError(
            f"the real pipeline's batch shape {image_spec.shape} is not static; use drop_remainder batching"
        )
    gen = tf.random.Generator.from_seed(seed)
    images = gen.uniform(image_spec.shape, dtype=image_spec.dtype)
    labels = gen.uniform(label_spec.shape, minval=0, maxval=num_classes, dtype=tf.int64)
    return tf.identity(images), tf.cast(labels, label_spec.dtype)
