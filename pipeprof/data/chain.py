"""A user's own tf.data pipeline, transformation by transformation, on stock TensorFlow.

``links(dataset)`` walks the chain of datasets a ``tf.data.Dataset`` was built from (each
transformation keeps its input), from the source to the dataset itself, and names each link
by what the user wrote: the transformation and, for a map or filter, the function's name and
the file and line where TensorFlow keeps it. ``measure(links)`` then iterates each prefix
alone (the pipeline up to and including that link, no model) for a while and reports its
rate in samples/s and its CPU cost in core-ms per sample; a link's marginal cost is its
prefix's cost minus the previous prefix's. Where a link cannot be measured alone (it merges
several inputs, its own inner pipelines are hidden in a function, or a cache that would
need a whole epoch first) the row says so instead of guessing.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from pipeprof.analysis.stats import rate_interval

MAX_CACHE_FILL = 200_000  # elements a cache may need before its steady state can be measured


@dataclass
class Link:
    index: int
    kind: str  # map, parallel_map, batch, shuffle, cache, prefetch, tensor_slice, ...
    function: str  # the user's function (map, filter, interleave), "" otherwise
    where: str  # file:line of that function, "" when TensorFlow does not keep it
    dataset: Any  # the dataset this link produces (its prefix of the pipeline)
    inputs: int  # how many datasets feed it
    note: str = ""  # why it cannot be measured alone, when it cannot

    @property
    def name(self) -> str:
        """What the user wrote: ``map(augment_image) at train.py:42``, ``batch``, ``prefetch``."""
        kind = self.kind.removeprefix("parallel_")
        what = f"{kind}({self.function})" if self.function else kind
        return f"{what} at {self.where}" if self.where else what


def _kind(ds: Any) -> str:
    name = type(ds).__name__.strip("_")
    name = re.sub(r"(V\d+)?Dataset(V\d+)?$", "", name) or type(ds).__name__
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return {
        "tensor_slice": "from_tensor_slices",
        "tensor": "from_tensors",
        "options": "with_options",
    }.get(kind, kind)


def _function(ds: Any) -> tuple[str, str]:
    """The user's function behind a map, filter or interleave, and where it is written."""
    for attr in ("_map_func", "_predicate", "_func"):
        wrapper = getattr(ds, attr, None)
        fn = getattr(wrapper, "_func", None)
        if fn is None:
            continue
        fn = getattr(fn, "python_function", fn)  # a tf.function
        fn = inspect.unwrap(fn)
        name = getattr(fn, "__name__", type(fn).__name__)
        try:
            where = f"{os.path.basename(inspect.getsourcefile(fn) or '')}:{inspect.getsourcelines(fn)[1]}"
        except (OSError, TypeError):
            code = getattr(fn, "__code__", None)
            where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else ""
        return name, where.strip(":")
    return "", ""


def links(dataset: tf.data.Dataset) -> list[Link]:
    """The chain from the source to ``dataset``, following each link's first input."""
    chain = []
    ds = dataset
    while ds is not None:
        inputs = ds._inputs() if hasattr(ds, "_inputs") else []  # noqa: SLF001 (TensorFlow keeps no public API for it)
        function, where = _function(ds)
        link = Link(0, _kind(ds), function, where, ds, len(inputs))
        if len(inputs) > 1:
            link.note = f"merges {len(inputs)} inputs: measured with all of them, only its first input's chain is shown"
        elif link.kind.removeprefix("parallel_") in ("interleave", "flat_map"):
            link.note = "the datasets its function opens are measured together with it"
        chain.append(link)
        ds = inputs[0] if inputs else None
    chain.reverse()
    for i, link in enumerate(chain):
        link.index = i
    return [c for c in chain if c.kind != "with_options"] or chain


def _samples(element: Any, batched: bool) -> int:
    if not batched:
        return 1
    first = tf.nest.flatten(element)[0]
    return int(first.shape[0]) if first.shape.rank else 1


def _prefix(link: Link) -> tf.data.Dataset:
    ds = link.dataset
    return ds.repeat() if ds.cardinality() != tf.data.INFINITE_CARDINALITY else ds


def measure(
    chain: list[Link], seconds: float = 2.0, warmup_elements: int = 5
) -> list[dict[str, Any]]:
    """Each prefix alone: samples/s, core-ms per sample, and each link's marginal cost."""
    rows = []
    prev_cost = 0.0
    batched = False
    for link in chain:
        batched = batched or link.kind in (
            "batch",
            "padded_batch",
            "map_and_batch",
            "parallel_batch",
        )
        row = {
            "index": link.index,
            "transformation": link.name,
            "kind": link.kind,
            "function": link.function,
            "where": link.where,
            "samples_per_s": math.nan,
            "samples_per_s_ci95": math.nan,
            "core_ms_per_sample": math.nan,
            "marginal_core_ms": math.nan,
            "note": link.note,
        }
        if link.kind == "cache":
            card = int(link.dataset.cardinality())
            if card < 0 or card > MAX_CACHE_FILL:
                row["note"] = (
                    "not measured alone: a cache's steady state needs one whole epoch first, and this "
                    "one's size is unknown or too large"
                )
                rows.append(row)
                continue
            warmup = card + warmup_elements
        else:
            warmup = warmup_elements
        it = iter(_prefix(link))
        for _ in range(warmup):
            next(it)
        ends, samples = [], []
        c0, t0 = time.process_time(), time.perf_counter()
        while True:
            element = next(it)
            ends.append(time.perf_counter())
            samples.append(_samples(element, batched))
            if ends[-1] - t0 >= seconds and len(ends) >= 10:
                break
        cpu = time.process_time() - c0
        del it
        durations = np.diff(np.array([t0] + ends))
        rate, half = rate_interval(np.asarray(samples, float), durations)
        cost = 1e3 * cpu / sum(samples)
        row.update(
            samples_per_s=rate,
            samples_per_s_ci95=half,
            core_ms_per_sample=cost,
            marginal_core_ms=max(0.0, cost - prev_cost),
        )
        prev_cost = cost
        rows.append(row)
    return rows
