"""File caches at a prefix the user names (``pipeline.cache.path``): claimed before use.

tf.data writes a file cache as ``<prefix>-shardIofN.index``, ``.data-*`` and lock files, and
reads an existing one back as it is. So pipeprof lets it write at a user's prefix only when
no such file exists yet, or when pipeprof's marker (``<prefix>.pipeprof-cache.json``) says
pipeprof made them; anything else would read, or overwrite, files that are not pipeprof's.
Caches inside a run directory need no claim: the run directory is new.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

from pipeprof import atomic
from pipeprof.errors import PipeprofError
from pipeprof.scenario import PipelineConfig

MARKER_SUFFIX = ".pipeprof-cache.json"


def user_prefix(pipe: PipelineConfig) -> str:
    """The user's file-cache prefix of a pipeline, or "" when it caches elsewhere or not at all."""
    return pipe.cache.path if pipe.cache.enabled and pipe.cache.kind == "file" else ""


def cache_files(prefix: str) -> list[Path]:
    """The files tf.data writes for ``prefix`` (every shard), as they exist now."""
    return sorted(Path(p) for p in glob.glob(glob.escape(prefix) + "-shard*"))


def marker(prefix: str) -> Path:
    return Path(prefix + MARKER_SUFFIX)


def claim(prefix: str, where: str) -> None:
    """Refuse ``prefix`` when cache files pipeprof did not make exist there; else mark it pipeprof's."""
    existing = cache_files(prefix)
    mark = marker(prefix)
    if existing and not mark.is_file():
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise PipeprofError(
            f"{where}: pipeline.cache.path '{prefix}': '{existing[0]}'{more} already exists and "
            f"pipeprof did not make it (tf.data would read or overwrite it); choose a new prefix"
        )
    if mark.is_file():
        return
    mark.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(mark, json.dumps({"made_by": "pipeprof", "prefix": prefix}) + "\n")
