"""What makes an image file or a TFRecord file bad: the rules, in plain Python (no TensorFlow).

One home for the rules. ``pipeline.py`` builds the same checks from these tables as a few
string ops per element (so a good file costs almost nothing to check), ``pipeprof doctor``
runs them over the files in Python, and the tests hold the two to the same verdicts.

An image passes when it starts with the signature of a format ``tf.io.decode_image`` reads
(JPEG, PNG, GIF, BMP; whatever its file name says) and, for JPEG and PNG, its end marker
(JPEG's EOI ``FF D9``, PNG's IEND chunk) lies within its last ``TAIL_BYTES`` bytes. A
truncated JPEG or PNG loses its end marker (JPEG's entropy-coded data never holds ``FF D9``:
every ``FF`` there is stuffed), while zero padding or a short trailer after it is fine.
Limits, by design of a check that reads only a file's head and tail: a JPEG with more than
``TAIL_BYTES`` of data appended after its end (some cameras' trailers) counts as truncated;
damage inside a file that keeps both ends intact passes, and ends the run at decode time
with a one-line error naming the variant (``badfiles.failure_line``).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


@dataclass(frozen=True)
class ImageFormat:
    name: str
    magic: bytes  # the file's first bytes
    end: bytes | None  # must occur within the last TAIL_BYTES bytes; None: not checked


FORMATS = (
    ImageFormat("JPEG", b"\xff\xd8\xff", b"\xff\xd9"),
    ImageFormat("PNG", b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"),  # the IEND chunk's type and CRC
    ImageFormat("GIF", b"GIF8", None),
    ImageFormat("BMP", b"BM", None),
)
HEAD_BYTES = max(len(f.magic) for f in FORMATS)
TAIL_BYTES = 256


class Bad(IntEnum):
    """Why an element is bad. The in-graph checks compute these codes; ``describe`` words them."""

    OK = 0
    EMPTY = 1
    NOT_AN_IMAGE = 2
    TRUNCATED_JPEG = 3
    TRUNCATED_PNG = 4
    UNREADABLE = 5
    CORRUPT_RECORD = 6  # a TFRecord file whose framing or checksum fails: the rest of it is skipped
    BAD_LABEL = 7  # a TFRecord's label missing or outside 0..num_classes-1
    END_OF_FILE = 8  # not bad: the marker after a TFRecord file's last record, dropped silently


TRUNCATED = {"JPEG": Bad.TRUNCATED_JPEG, "PNG": Bad.TRUNCATED_PNG}

_TEXT = {
    Bad.EMPTY: "empty file (0 bytes)",
    Bad.NOT_AN_IMAGE: "not an image: no JPEG, PNG, GIF or BMP signature",
    Bad.TRUNCATED_JPEG: f"truncated JPEG: no end-of-image marker (FF D9) in its last {TAIL_BYTES} bytes",
    Bad.TRUNCATED_PNG: f"truncated PNG: no IEND chunk in its last {TAIL_BYTES} bytes",
    Bad.UNREADABLE: "unreadable",
    Bad.CORRUPT_RECORD: "corrupt record (framing or checksum)",
    Bad.BAD_LABEL: "label missing or out of range",
}


def describe(code: int) -> str:
    return _TEXT.get(Bad(code), Bad(code).name.lower())


def check_bytes(head: bytes, tail: bytes, size: int) -> Bad:
    """The verdict on an image from its first ``HEAD_BYTES`` bytes, its last ``TAIL_BYTES``
    bytes (the whole file when shorter) and its size."""
    if size == 0:
        return Bad.EMPTY
    for fmt in FORMATS:
        if head.startswith(fmt.magic):
            if fmt.end is not None and fmt.end not in tail:
                return TRUNCATED[fmt.name]
            return Bad.OK
    return Bad.NOT_AN_IMAGE


def check_data(data: bytes) -> Bad:
    return check_bytes(data[:HEAD_BYTES], data[-TAIL_BYTES:], len(data))


@dataclass(frozen=True)
class FileVerdict:
    code: Bad
    reason: str  # "" when the file is good
    size: int  # bytes (0 when it cannot be read)

    @property
    def ok(self) -> bool:
        return self.code == Bad.OK


def check_file(path: str | Path) -> FileVerdict:
    """An image file's verdict; reads only its head and tail."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(HEAD_BYTES)
            fh.seek(max(0, size - TAIL_BYTES))
            tail = fh.read(TAIL_BYTES)
    except OSError as exc:
        return FileVerdict(Bad.UNREADABLE, f"unreadable: {exc.strerror or exc}", 0)
    code = check_bytes(head, tail, size)
    return FileVerdict(code, "" if code == Bad.OK else describe(code), size)


# --- TFRecord framing: uint64 length, uint32 masked CRC-32C of the length, data, uint32 masked CRC-32C of the data


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def scan_tfrecord(path: str | Path) -> tuple[int, str | None]:
    """Walk a TFRecord file's framing (each record's length and the length's checksum,
    seeking over the data): the number of records, and what is wrong, if anything. Reads
    12 bytes per record, so it finds truncation and broken framing cheaply; a record whose
    data fails its checksum is found while the run reads it."""
    records = 0
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            offset = 0
            while offset < size:
                header = fh.read(12)
                if len(header) < 12:
                    return (
                        records,
                        f"truncated: record {records} at byte {offset} has a partial header",
                    )
                (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
                if masked_crc32c(header[:8]) != crc:
                    return (
                        records,
                        f"corrupt record {records} at byte {offset}: its length fails its checksum",
                    )
                end = offset + 12 + length + 4
                if end > size:
                    return records, (
                        f"truncated: record {records} at byte {offset} needs {end - size} bytes "
                        f"more than the file has"
                    )
                fh.seek(end)
                offset = end
                records += 1
    except OSError as exc:
        return records, f"unreadable: {exc.strerror or exc}"
    return records, None
