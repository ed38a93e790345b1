"""Results are written whole or not at all: a temp file beside the target, then a rename.

A reader (the dashboard, a user's script, the next command) never sees half a file, and an
interrupted write leaves the previous version, not a truncated one. Imports nothing heavy,
so ranks use it too.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # only ours: the name carries this process's id
