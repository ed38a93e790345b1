"""Listing and counting a data set without TensorFlow (for the pipeline, memory checks and doctor)."""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy

from pipeprof.errors import PipeprofError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def count_images(root: str | Path) -> int:
    root = Path(root)
    if not root.is_dir():
        return 0
    return sum(
        1
        for c in root.iterdir()
        if c.is_dir() and not c.name.startswith(".")
        for p in c.iterdir()
        if p.suffix.lower() in IMAGE_EXTENSIONS
    )


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
        raise PipeprofError(
            f"data.path: '{root}' has no class sub-folders (expected one folder per class)"
        )
    files: list[str] = []
    unreadable: list[tuple[str, str]] = []
    for c in classes:
        with os.scandir(root / c) as entries:
            found = sorted(
                (e for e in entries if os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS),
                key=lambda e: e.path,
            )
        for entry in found:
            if (why := _unreadable(entry)) is None:
                files.append(entry.path)
            else:
                unreadable.append((entry.path, why))
    if not files and not unreadable:
        raise PipeprofError(
            f"data.path: '{root}' holds no .jpg/.jpeg/.png files in its class folders"
        )
    return FolderListing(files, classes, unreadable)


def _unreadable(entry: os.DirEntry) -> str | None:
    if not entry.is_file():  # from the directory entry; follows links
        if entry.is_symlink() and not os.path.exists(entry.path):
            return "unreadable: a link to nothing"
        return "unreadable: not a regular file"
    if not os.access(entry.path, os.R_OK):
        return "unreadable: permission denied"
    return None


def image_header(path: str | Path) -> tuple[str, int, int] | None:
    """(format, width, height) of a JPEG or PNG file from its header, without decoding it;
    None when the file is neither or its header cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(32)
            if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
                return "png", int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
            if not head.startswith(b"\xff\xd8"):
                return None
            fh.seek(2)
            while True:  # walk the markers to the frame header (SOF0..SOF15, not DHT/JPG/DAC)
                marker = fh.read(4)
                if len(marker) < 4 or marker[0] != 0xFF:
                    return None
                kind, length = marker[1], int.from_bytes(marker[2:4], "big")
                if 0xC0 <= kind <= 0xCF and kind not in (0xC4, 0xC8, 0xCC):
                    frame = fh.read(5)
                    return (
                        "jpeg",
                        int.from_bytes(frame[3:5], "big"),
                        int.from_bytes(frame[1:3], "big"),
                    )
                fh.seek(length - 2, os.SEEK_CUR)
    except OSError:
        return None


def stored_side(data_root: str | Path, sample: int = 8) -> tuple[str, int] | None:
    """The format and the smallest short side of the first ``sample`` images of an image folder
    ("mixed" when formats differ); None when none can be read."""
    try:
        files = scan_image_folder(data_root).files[:sample]
    except PipeprofError:
        return None
    headers = [h for f in files if (h := image_header(f)) is not None]
    if not headers:
        return None
    formats = {h[0] for h in headers}
    return (formats.pop() if len(formats) == 1 else "mixed"), min(min(h[1], h[2]) for h in headers)


def decode_image(encoded: bytes, size: int, reduced: bool) -> numpy.ndarray:
    """An image file's bytes as float32 HWC in 0..1, resized to ``size`` (bilinear); a JPEG
    with ``reduced`` decoded at the smallest DCT scale that keeps ``size`` (Pillow's draft)."""
    from PIL import Image

    with Image.open(io.BytesIO(encoded)) as image:
        if reduced:
            image.draft("RGB", (size, size))
        rgb = image.convert("RGB")
        if rgb.size != (size, size):
            rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
        return numpy.asarray(rgb, dtype=numpy.float32) / 255.0


# the sources a Python input library (the DataLoader, Grain) reads: image folders
FOLDER_SOURCES = ("generated", "folder")


def labelled_folder(
    data: Any, pipe: Any, data_root: str, library: str
) -> tuple[list[str], list[int]]:
    """The image files of ``data_root`` and their labels (their class folder's index), for
    ``library``, an input library that reads image folders in Python and caches in memory;
    a scenario it cannot serve is a one-line error."""
    if data.source not in FOLDER_SOURCES:
        raise PipeprofError(
            f"data.source {data.source!r}: data.library {library} reads "
            f"{' or '.join(FOLDER_SOURCES)} image folders"
        )
    if pipe.cache.enabled and pipe.cache.kind != "memory":
        raise PipeprofError(
            f"pipeline.cache.kind 'file': data.library {library} caches in memory only"
        )
    if pipe.service.enabled:
        raise PipeprofError("pipeline.service: a tf.data service feeds tf.data pipelines only")
    listing = scan_image_folder(data_root)
    if len(listing.classes) != data.num_classes:
        raise PipeprofError(
            f"data.num_classes is {data.num_classes} but '{data_root}' has "
            f"{len(listing.classes)} class folders"
        )
    index = {c: i for i, c in enumerate(listing.classes)}
    return listing.files, [index[f.rsplit("/", 2)[-2]] for f in listing.files]


def read_image(path: str, size: int, reduced: bool, s_per_byte: float = 0.0) -> numpy.ndarray:
    """Image file ``path`` read (sleeping ``s_per_byte`` a byte read: throttled storage) and
    decoded (``decode_image``); an undecodable file is a one-line error naming it."""
    with open(path, "rb") as fh:
        encoded = fh.read()
    if s_per_byte:
        time.sleep(len(encoded) * s_per_byte)
    try:
        return decode_image(encoded, size, reduced)
    except Exception as exc:  # Pillow's UnidentifiedImageError, OSError on a truncated file
        raise PipeprofError(f"{path}: cannot be decoded ({exc})") from None
