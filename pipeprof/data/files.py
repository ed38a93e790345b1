"""Listing and counting a data set without TensorFlow (for the pipeline, memory checks and doctor)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeprof.errors import PipeprofError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def count_images(root: str | Path) -> int:
    root = Path(root)
    if not root.is_dir():
        return 0
    return sum(1 for c in root.iterdir() if c.is_dir() and not c.name.startswith(".")
               for p in c.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)


@dataclass(frozen=True)
class FolderListing:
    """An image folder (one sub-folder per class), sorted: the files to read, the class names,
    and the entries with an image extension that cannot be read as files at all."""

    files: list[str]
    classes: list[str]
    unreadable: list[tuple[str, str]]  # (path, reason)


def scan_image_folder(root: str | Path) -> FolderListing:
    """List an image folder. An entry that is not a readable file (a dangling link, a
    directory named like an image, no read permission) is set apart with its reason: the
    pipeline skips or refuses it (``data.on_bad_file``) instead of failing to open it."""
    root = Path(root)
    if not root.is_dir():
        raise PipeprofError(f"data.path: image folder '{root}' does not exist")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise PipeprofError(f"data.path: '{root}' has no class sub-folders (expected one folder per class)")
    files: list[str] = []
    unreadable: list[tuple[str, str]] = []
    for c in classes:
        with os.scandir(root / c) as entries:
            found = sorted((e for e in entries if os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS),
                           key=lambda e: e.path)
        for entry in found:
            if (why := _unreadable(entry)) is None:
                files.append(entry.path)
            else:
                unreadable.append((entry.path, why))
    if not files and not unreadable:
        raise PipeprofError(f"data.path: '{root}' holds no .jpg/.jpeg/.png files in its class folders")
    return FolderListing(files, classes, unreadable)


def _unreadable(entry: os.DirEntry) -> str | None:
    if not entry.is_file():  # from the directory entry; follows links
        if entry.is_symlink() and not os.path.exists(entry.path):
            return "unreadable: a link to nothing"
        return "unreadable: not a regular file"
    if not os.access(entry.path, os.R_OK):
        return "unreadable: permission denied"
    return None
