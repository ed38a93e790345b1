"""Bad files met by a pipeline: counted, written down, or turned into the run's one-line error.

A rank's pipeline hands every bad element it drops to a ``BadFiles`` (from a
``tf.py_function`` that runs for bad elements only). With a log path, each distinct file is
appended as one JSON line to ``RUN_DIR/bad_files/npN-VARIANT-rankR.jsonl``; the launcher
merges those (``load``) into ``bad_files.csv`` and the summary's ``bad_files`` column. Without
one (the stage benchmark, tune), they are only counted. With ``data.on_bad_file = "fail"``
the first one is remembered and the rank ends with ``failure_line``'s one line.

Imports nothing heavy (ranks write, the launcher reads, neither needs TensorFlow here).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

LOG_DIR = "bad_files"
_LOG_NAME = re.compile(r"np(\d+)-(.+)-rank(\d+)\.jsonl")
COLUMNS = ["np", "variant", "path", "reason", "rank", "host"]
HINT_FAIL = 'data.on_bad_file = "fail"; "skip" skips and counts bad files'
HINT_DOCTOR = "`pipeprof doctor SCENARIO` lists the files its checks find bad"
# the lines a tf.data service worker prints for the bad elements it met (data.screen writes them,
# the launcher reads them from the workers' logs without TensorFlow)
REMOTE_TAG = "pipeprof-bad-elements"


def log_path(run_dir: str | Path, np: int, variant: str, rank: int) -> Path:
    return Path(run_dir) / LOG_DIR / f"np{np}-{variant}-rank{rank}.jsonl"


class BadFileError(Exception):
    """Raised inside the pipeline (data.on_bad_file = "fail"); the rank reports ``failure_line``."""


class BadFiles:
    """One pipeline's bad files. Thread-safe: tf.data calls ``add`` from its own threads."""

    def __init__(
        self, log: str | Path | None = None, *, variant: str = "", listener=None, host: str = ""
    ) -> None:
        self.log = Path(log) if log is not None else None
        self.variant = variant
        self.host = host  # where the pipeline reads (a rank's host): in each line of the log
        self.listener = (
            listener  # called with (path, reason) for each new bad file: the live stream
        )
        self._lock = threading.Lock()
        self._seen: dict[str, str] = {}  # path -> reason, first one kept; each file counts once

    @property
    def count(self) -> int:
        return len(self._seen)

    def items(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._seen.items())

    def add(self, path: str, reason: str) -> None:
        with self._lock:
            if path in self._seen:  # met again in a later epoch
                return
            self._seen[path] = reason
            if self.log is not None:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                with self.log.open("a", encoding="utf-8") as fh:
                    line = {
                        "path": path,
                        "reason": reason,
                        **({"host": self.host} if self.host else {}),
                    }
                    fh.write(json.dumps(line) + "\n")
        if self.listener is not None:
            self.listener(path, reason)

    def failure(self, path: str, reason: str) -> str:
        """The one line that ends a run on this bad file (data.on_bad_file = "fail")."""
        return f"{f'variant {self.variant}: ' if self.variant else ''}bad file {path}: {reason} ({HINT_FAIL})"

    def fail(self, path: str, reason: str) -> None:
        """Called inside the pipeline: remember the first bad file for the rank's error line
        (TensorFlow wraps what a py_function raises in its own error), and stop."""
        global _failure
        line = self.failure(path, reason)
        with _state_lock:
            _failure = _failure or line
        raise BadFileError(line)


# What the rank says when its input fails: the first bad file under "fail", else the variant
# whose pipeline was built last (the one running) for a decode error the checks let through.
_state_lock = threading.Lock()
_failure: str | None = None
_current_variant = ""


def building(variant: str) -> None:
    """A pipeline is being built for ``variant``: the one that runs next, with no failure yet."""
    global _current_variant, _failure
    with _state_lock:
        _current_variant, _failure = variant, None


def failure_line(exc: BaseException) -> str | None:
    """One line for an input failure that ended a rank, or None when ``exc`` is not one."""
    if _failure is not None:
        return _failure
    if isinstance(exc, BadFileError):
        return str(exc)
    kind = type(exc).__name__
    if kind not in (
        "InvalidArgumentError",
        "DataLossError",
        "NotFoundError",
        "PermissionDeniedError",
    ):
        return None
    what = _core_message(str(exc))
    decode = any(
        k in what
        for k in (
            "Uncompress",
            "Invalid PNG",
            "image file format",
            "Input is empty",
            "decode",
            "Decode",
        )
    )
    records = kind == "DataLossError" or "record" in what
    if not (decode or records or kind in ("NotFoundError", "PermissionDeniedError")):
        return None
    variant = f"variant {_current_variant}: " if _current_variant else ""
    if records:
        return f"{variant}a TFRecord file could not be read ({kind}: {what}); {HINT_DOCTOR}"
    if decode:
        return (
            f"{variant}a file failed to decode past pipeprof's checks, and TensorFlow does not say which "
            f"({kind}: {what}); {HINT_DOCTOR}"
        )
    return f"{variant}a data file could not be read ({kind}: {what}); {HINT_DOCTOR}"


def _core_message(text: str) -> str:
    """TensorFlow's message without its ``{{function_node …}}`` prefix and ``[Op:…]`` suffix."""
    text = " ".join(text.split())
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[\[\{\{node [^]]*\]\]", "", text)
    text = re.sub(r"\s*\[Op:[^]]*\].*$", "", text)
    return text[:300]


def load(run_dir: str | Path) -> pd.DataFrame:
    """Every rank's bad files of a run, one row per (np, variant, path): the first reason given."""
    import pandas as pd

    rows = []
    folder = Path(run_dir) / LOG_DIR
    for f in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        m = _LOG_NAME.fullmatch(f.name)
        if m is None:
            continue
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue  # a line cut by a killed rank
            rows.append(
                {
                    "np": int(m.group(1)),
                    "variant": m.group(2),
                    "path": str(d.get("path", "")),
                    "reason": str(d.get("reason", "")),
                    "rank": int(m.group(3)),
                    "host": str(d.get("host", "")),
                }
            )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.drop_duplicates(["np", "variant", "path"]).sort_values(
        ["np", "variant", "path"], ignore_index=True
    )
