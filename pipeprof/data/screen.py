"""Bad elements screened out of the tf.data pipeline before they are decoded.

TensorFlow cannot catch a decode error per element: one truncated JPEG ends the iterator
with ``jpeg::Uncompress failed``. So every encoded image is checked first with the rules of
``data.check`` as string ops, and the bad ones are dropped before decoding and before
batching (batches stay full; throughput counts only samples that trained). A bad element is
handed to a ``BadFiles`` by a ``tf.py_function`` inside a ``tf.cond`` that runs only when a
group holds one, or, with ``data.on_bad_file = "fail"``, ends the pipeline naming it.

Cost: each op of a tf.data function costs a few microseconds to dispatch, which a dozen
string ops per image would add to every sample. So the checks run on groups of
``GROUP`` elements: files are read by ``GROUP`` unrolled ``read_file`` ops in one function
(the per-element map of the original pipeline did that read too) and checked as vectors;
TFRecords are parsed with the vectorised ``parse_example``. The decode map stays per element,
as before. Measured: docs/validation.md, "What the bad-file checks cost".
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable

import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

from pipeprof.data import check
from pipeprof.data.badfiles import REMOTE_TAG, BadFiles
from pipeprof.data.check import Bad
from pipeprof.errors import PipeprofError
from pipeprof.scenario import DataConfig

GROUP = 32  # elements checked together


def image_check(data: tf.Tensor) -> tf.Tensor:
    """``check.check_data`` as string ops over a vector of encoded images: their ``Bad`` codes (int32)."""
    n = tf.strings.length(data)
    zeros, shape = tf.zeros_like(n), tf.shape(n)
    head = tf.strings.substr(data, zeros, tf.fill(shape, check.HEAD_BYTES))
    tail = tf.strings.substr(
        data, tf.maximum(n - check.TAIL_BYTES, 0), tf.fill(shape, check.TAIL_BYTES)
    )
    code = tf.fill(shape, int(Bad.NOT_AN_IMAGE))
    for fmt in reversed(check.FORMATS):
        verdict = tf.fill(shape, int(Bad.OK))
        if fmt.end is not None:  # the marker is in the tail when splitting on it gives two pieces
            # the raw op: tf.strings.split's ragged result costs more ops than the check itself
            pieces = tf.raw_ops.StringSplitV2(input=tail, sep=fmt.end, maxsplit=1)
            rows = tf.cast(pieces.indices[:, 0], tf.int32)
            has_end = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, tf.size(n)) > 1
            verdict = tf.where(has_end, verdict, int(check.TRUNCATED[fmt.name]))
        magic = tf.equal(tf.strings.substr(head, zeros, tf.fill(shape, len(fmt.magic))), fmt.magic)
        code = tf.where(magic, verdict, code)
    return tf.where(tf.equal(n, 0), int(Bad.EMPTY), code)


Describe = Callable[..., list[tuple[str, str]]]


class BadElements:
    """Hands bad elements to a ``BadFiles`` (skip), or ends the pipeline with the first (fail).

    ``remote`` ("variant\trank"): the pipeline runs in another process (a tf.data service
    worker) where no Python of this process exists, so a group's bad elements are printed to
    that process's stderr instead, as one ``REMOTE_TAG`` line of serialised tensors that
    ``remote_bad_elements`` turns back into (path, reason) with the same ``describe``."""

    def __init__(self, sink: BadFiles, fail: bool, remote: str = "") -> None:
        self.sink, self.fail, self.remote = sink, fail, remote

    def python(self, path: str, reason: str) -> None:
        """A bad file found while building (it cannot even be opened)."""
        if self.fail:
            raise PipeprofError(self.sink.failure(path, reason))
        self.sink.add(path, reason)

    def note(
        self, codes: tf.Tensor, describe: Describe, *args: tf.Tensor, kind: str = "files"
    ) -> tf.Tensor:
        """``codes`` (a group's), after handing its bad elements to the sink: in Python, and
        only when the group has one; ``describe(codes, *args)`` (numpy) names them.
        ``kind`` ("files" or "records") says which describe, for a remote pipeline."""

        def record(codes_t: tf.Tensor, *arg_ts: tf.Tensor) -> tf.Tensor:
            for path, reason in describe(codes_t.numpy(), *(a.numpy() for a in arg_ts)):
                if self.fail:
                    self.sink.fail(path, reason)
                self.sink.add(path, reason)
            return codes_t

        def bad() -> tf.Tensor:
            if self.remote:
                fields = [tf.io.encode_base64(tf.io.serialize_tensor(t)) for t in (codes, *args)]
                line = tf.strings.join([REMOTE_TAG, self.remote, kind, *fields], separator="\t")
                with tf.control_dependencies([tf.print(line, output_stream=sys.stderr)]):
                    return tf.identity(codes)
            out = tf.py_function(record, [codes, *args], tf.int32)
            out.set_shape(codes.shape)
            return out

        quiet = tf.reduce_all(
            tf.logical_or(tf.equal(codes, int(Bad.OK)), tf.equal(codes, int(Bad.END_OF_FILE)))
        )
        return tf.cond(quiet, lambda: tf.identity(codes), bad)


def remote_bad_elements(lines: list[str], data: DataConfig) -> list[tuple[str, int, str, str]]:
    """The bad elements a remote pipeline printed (``BadElements(remote=...)``): (variant,
    rank, path, reason) for each, named by the same describe as in a rank."""
    describers: dict[str, Describe] = {"files": _describe_files, "records": _describe_records(data)}
    out = []
    for line in lines:
        tag, variant, rank, kind, *fields = line.rstrip("\n").split("\t")
        if tag != REMOTE_TAG or kind not in describers:
            continue
        out += [
            (variant, int(rank), path, reason)
            for path, reason in describers[kind](*map(_parsed, fields))
        ]
    return out


def _parsed(field: str):
    """A tensor printed by ``BadElements`` (web-safe base64 of its TensorProto, which holds its
    dtype) as numpy: an array, or a scalar as ``.numpy()`` gives one."""
    proto = tensor_pb2.TensorProto.FromString(
        base64.urlsafe_b64decode(field + "=" * (-len(field) % 4))
    )
    value = tf.make_ndarray(proto)
    return value[()] if value.ndim == 0 else value


def text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def _is_bad(code: int) -> bool:
    return code not in (Bad.OK, Bad.END_OF_FILE)


# --- image files


def read_files(
    paths: tf.data.Dataset, bad: BadElements, parallel: int, deterministic: bool | None
) -> tf.data.Dataset:
    """File paths → (path, encoded bytes) of the good files; the bad ones go to ``bad``."""

    def read_group(group: tf.Tensor):
        n = tf.shape(group)[0]
        padded = tf.concat(
            [group, tf.fill([GROUP - n], group[0])], 0
        )  # the epoch's last group is short
        encoded = tf.stack([tf.io.read_file(p) for p in tf.unstack(padded, num=GROUP)])[:n]
        codes = bad.note(image_check(encoded), _describe_files, group, kind="files")
        keep = tf.equal(codes, int(Bad.OK))
        return tf.boolean_mask(group, keep), tf.boolean_mask(encoded, keep)

    groups = paths.batch(GROUP).map(
        read_group, num_parallel_calls=parallel, deterministic=deterministic
    )
    return groups.unbatch()


def _describe_files(codes, paths) -> list[tuple[str, str]]:
    return [(text(p), check.describe(c)) for c, p in zip(codes, paths) if _is_bad(c)]


# --- TFRecord files

# TFRecord framing: each record is its data plus 16 bytes (length, its checksum, the data's checksum)
RECORD_OVERHEAD = 16


def tfrecord_elements(data: DataConfig, with_label: bool, bad: BadElements) -> Callable:
    """The interleave function for one TFRecord file (path, size, no glob characters in
    its path): its good records as
    (encoded image, label, record); bad ones and a corrupt rest of the file go to ``bad``.

    A record that fails its checksum or framing ends the file's records (``ignore_errors``
    on a TFRecordDataset moves on to its next file, and it has none). After the last one
    comes an end marker holding the bytes consumed: fewer than the file's size means the
    rest was corrupt, and the file is reported."""
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string, default_value="")}
    if with_label:
        features["image/class/label"] = tf.io.FixedLenFeature([], tf.int64, default_value=-1)
    describe = _describe_records(data)

    def elements(path: tf.Tensor, file_size: tf.Tensor, globless: tf.Tensor) -> tf.data.Dataset:
        # a file gone since the listing is left out: ignore_errors would retry opening it forever
        # (a name with glob characters cannot be asked that way; it goes on unasked)
        there = tf.data.Dataset.from_tensors(path).filter(
            lambda p: tf.logical_or(tf.logical_not(globless), tf.size(tf.io.matching_files(p)) > 0)
        )
        groups = there.flat_map(tf.data.TFRecordDataset).ignore_errors().batch(GROUP)
        # then an empty group, which batch never makes: the end marker
        marked = groups.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))

        def screen(state, records):
            first, consumed = state
            end = tf.equal(tf.size(records), 0)
            consumed += tf.reduce_sum(
                tf.cast(tf.strings.length(records), tf.int64) + RECORD_OVERHEAD
            )
            ex = tf.io.parse_example(records, features)
            encoded = ex["image/encoded"]
            codes = image_check(encoded)
            if with_label:
                raw = ex["image/class/label"]
                label = tf.cast(raw - data.label_offset, tf.int32)
                wrong = (raw < 0) | (label < 0) | (label >= data.num_classes)
                codes = tf.where(tf.equal(codes, int(Bad.OK)) & wrong, int(Bad.BAD_LABEL), codes)
            else:
                raw, label = tf.zeros_like(codes, tf.int64), tf.zeros_like(codes)
            # the end marker's code: was the file read whole?
            whole = tf.logical_or(tf.logical_not(end), tf.equal(consumed, file_size))
            file_code = tf.where(whole, int(Bad.END_OF_FILE), int(Bad.CORRUPT_RECORD))
            codes = bad.note(
                tf.concat([codes, [file_code]], 0),
                describe,
                path,
                first,
                records,
                raw,
                consumed,
                file_size,
                kind="records",
            )[:-1]
            keep = tf.equal(codes, int(Bad.OK))
            out = (
                tf.boolean_mask(encoded, keep),
                tf.boolean_mask(label, keep),
                tf.boolean_mask(records, keep),
            )
            return (first + tf.cast(tf.size(records), tf.int64), consumed), out

        # one function call per group: count the bytes read (in order) and screen the records
        return marked.scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), screen).unbatch()

    return elements


def _describe_records(data: DataConfig) -> Describe:
    def describe(codes, path, first, records, raw, consumed, file_size) -> list[tuple[str, str]]:
        path_s = text(path)
        out = []
        for i, code in enumerate(codes[:-1]):
            if not _is_bad(code):
                continue
            index = first + i
            name = _example_filename(records[i])
            prefix = f"image/filename {name}: " if name else ""
            if code == Bad.BAD_LABEL:
                what = (
                    "no image/class/label"
                    if raw[i] < 0
                    else (
                        f"image/class/label {raw[i]} minus data.label_offset {data.label_offset} is outside "
                        f"0..{data.num_classes - 1}"
                    )
                )
            else:
                what = check.describe(code)
            out.append((f"{path_s}[{index}]", prefix + what))
        if codes[-1] == Bad.CORRUPT_RECORD:
            if consumed == 0:
                out.append(
                    (
                        path_s,
                        f"corrupt or unreadable from its first record (0 of {file_size:,} bytes read)",
                    )
                )
            else:
                out.append(
                    (
                        path_s,
                        f"corrupt or truncated after record {first - 1}: the rest of the file is "
                        f"skipped ({consumed:,} of {file_size:,} bytes read)",
                    )
                )
        return out

    return describe


def _example_filename(record: bytes) -> str:
    from tensorflow.core.example import example_pb2

    try:
        feature = example_pb2.Example.FromString(record).features.feature.get("image/filename")
    except Exception:  # protobuf's DecodeError: the record is no Example; say nothing more
        return ""
    if feature is None or not feature.bytes_list.value:
        return ""
    return text(feature.bytes_list.value[0])
