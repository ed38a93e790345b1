"""The built-in dataset: real image files on disk, deterministic from a seed.

Each class is an oriented colour grating (its angle and hue set by the class) with random
frequency, phase, a distracting ellipse and noise, so a small CNN can learn it and a
decoder has real JPEG/PNG work to do. Images are written one folder per class; the folder
only appears under its final name once complete, so an interrupted run is redone, never
half-used. The generator deletes or replaces only folders it made (its marker inside, nothing
but its own files): a data.path that names a user's folder is refused, never emptied.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from pipeprof.errors import PipeprofError
from pipeprof.scenario import GenerateConfig

COMPLETE_MARKER = ".pipeprof-complete.json"
PARTIAL_MARKER = ".pipeprof-partial.json"  # in ``<name>.partial`` while pipeprof writes it


def default_root() -> Path:
    """``PIPEPROF_DATA_DIR``, or the user's cache; set but empty counts as unset, as a shell
    reads it (``Path("")`` would be the current folder: datasets written wherever it runs)."""
    return Path(
        os.environ.get("PIPEPROF_DATA_DIR") or Path.home() / ".cache" / "pipeprof" / "datasets"
    )


def dataset_dir(cfg: GenerateConfig, path: str = "") -> Path:
    """Where a generated dataset lives: ``path`` if given, else a folder named by its config."""
    if path:
        return Path(path).expanduser()
    key = hashlib.sha1(json.dumps(cfg.__dict__, sort_keys=True).encode()).hexdigest()[:10]
    return default_root() / f"gen-{cfg.classes}c-{cfg.size}px-{cfg.images}-{key}"


def is_complete(root: Path, cfg: GenerateConfig) -> bool:
    marker = root / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()) == cfg.__dict__
    except (OSError, ValueError):
        return False


def render(cfg: GenerateConfig, index: int) -> tuple[np.ndarray, int]:
    """Image ``index`` of the dataset as uint8 HxWx3, and its class. Pure and deterministic."""
    label = index % cfg.classes
    rng = np.random.default_rng([cfg.seed, index])
    n = cfg.size
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / n
    angle = np.pi * label / cfg.classes + rng.normal(0, 0.05)
    freq = rng.uniform(3.0, 6.0)
    phase = rng.uniform(0, 2 * np.pi)
    wave = 0.5 + 0.5 * np.sin(2 * np.pi * freq * (xx * np.cos(angle) + yy * np.sin(angle)) + phase)
    hue = label / cfg.classes + rng.normal(0, 0.03)
    base = 0.5 + 0.5 * np.cos(2 * np.pi * (hue + np.array([0.0, 1 / 3, 2 / 3], dtype=np.float32)))
    img = (
        wave[..., None] * base[None, None, :]
        + (1 - wave[..., None]) * (1 - base[None, None, :]) * 0.6
    )
    # a distractor that carries no class information
    cy, cx, ry, rx = (
        rng.uniform(0.2, 0.8),
        rng.uniform(0.2, 0.8),
        rng.uniform(0.05, 0.25),
        rng.uniform(0.05, 0.25),
    )
    blob = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1.0
    img[blob] = rng.uniform(0, 1, size=3)
    img += rng.normal(0, 0.06, size=img.shape)
    return (np.clip(img, 0, 1) * 255).astype(np.uint8), label


def partial_dir(root: Path) -> Path:
    """Where ``root`` is written before it appears under its final name."""
    return root.with_name(root.name + ".partial")


_MADE_HERE = re.compile(r"class_\d{3}/img_\d{6}\.(jpg|png)|class_\d{3}")


def _foreign_entry(folder: Path) -> str | None:
    """The first entry of ``folder`` that the generator does not write, or None."""
    for entry in sorted(folder.rglob("*")):
        rel = entry.relative_to(folder).as_posix()
        if rel in (COMPLETE_MARKER, PARTIAL_MARKER):
            continue
        if (
            entry.is_symlink()
            or not _MADE_HERE.fullmatch(rel)
            or entry.is_dir() != ("/" not in rel)
        ):
            return rel
    return None


def _removable(folder: Path, marker: str) -> str | None:
    """Why pipeprof may not delete ``folder`` (None when it may): it must be an empty
    directory, or carry ``marker`` and hold nothing but what the generator writes."""
    if folder.is_symlink() or not folder.is_dir():
        return "is not a directory pipeprof made"
    if not any(folder.iterdir()):
        return None
    if not (folder / marker).is_file():
        first = min(p.name for p in folder.iterdir())
        return f"exists and holds files pipeprof did not make (e.g. '{first}')"
    if (foreign := _foreign_entry(folder)) is not None:
        return f"holds a file pipeprof did not write ('{foreign}')"
    return None


def check_target(root: Path, cfg: GenerateConfig, where: str = "") -> None:
    """Refuse, before anything is written, to generate into a folder pipeprof did not make.

    The dataset goes into a folder that does not exist, is empty, or was generated by
    pipeprof (its marker, another config); its ``.partial`` twin must be absent, empty or
    pipeprof's own. Anything else is a user's folder and is never touched.
    """
    where = f"{where} " if where else ""
    root = Path(os.path.abspath(Path(root).expanduser()))
    if not root.name or root == root.parent:
        raise PipeprofError(f"{where}{root}: cannot generate a dataset into a file system root")
    if (root.exists() or root.is_symlink()) and not is_complete(root, cfg):
        if (why := _removable(root, COMPLETE_MARKER)) is not None:
            raise PipeprofError(
                f"{where}{root} {why}; the generator writes only into a new or empty folder, "
                f"or one it generated; choose another data.path"
            )
    tmp = partial_dir(root)
    if tmp.exists() or tmp.is_symlink():
        if (why := _removable(tmp, PARTIAL_MARKER)) is not None and _removable(
            tmp, COMPLETE_MARKER
        ) is not None:
            raise PipeprofError(
                f"{where}{tmp} {why}; pipeprof uses that name for an unfinished dataset: "
                f"move it away or choose another data.path"
            )


class GeneratingElsewhere(PipeprofError):
    """Another process holds the dataset's claim: it is being generated now."""


def _claim(marker: IO[str], root: Path, where: str) -> None:
    try:
        fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise GeneratingElsewhere(
            f"{where + ' ' if where else ''}{root}: another pipeprof is generating this "
            f"dataset now; wait for it to finish"
        ) from None


def encoder(cfg: GenerateConfig) -> Callable[[np.ndarray], bytes]:
    """What writes an image's file: TensorFlow's encoder where TensorFlow is installed (the
    files every earlier run read), else Pillow's (a PyTorch install has no TensorFlow). Both
    are libjpeg at the same quality, so their files decode alike."""
    from importlib.util import find_spec

    if find_spec("tensorflow") is not None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        if cfg.format == "jpeg":
            return lambda pixels: tf.io.encode_jpeg(pixels, quality=cfg.quality).numpy()
        return lambda pixels: tf.io.encode_png(pixels).numpy()
    import io

    from PIL import Image

    def pillow(pixels: np.ndarray) -> bytes:
        out = io.BytesIO()
        image = Image.fromarray(np.asarray(pixels, dtype=np.uint8))
        if cfg.format == "jpeg":
            image.save(out, format="JPEG", quality=cfg.quality)
        else:
            image.save(out, format="PNG")
        return out.getvalue()

    return pillow


def generate(
    cfg: GenerateConfig,
    root: Path,
    progress: Callable[[int, int], None] | None = None,
    where: str = "",
) -> Path:
    """Write the dataset under ``root`` (class_XX/img_NNNNNN.jpg) unless it is already there.

    Only folders pipeprof made are ever deleted (see ``check_target``); ``where`` prefixes
    a refusal (e.g. ``"s.toml: data.path"``)."""
    root = Path(os.path.abspath(Path(root).expanduser()))
    if is_complete(root, cfg):
        return root
    check_target(root, cfg, where)
    encode = encoder(cfg)

    tmp = partial_dir(root)
    if tmp.exists():
        if (tmp / PARTIAL_MARKER).is_file():
            with (tmp / PARTIAL_MARKER).open() as held:
                _claim(held, root, where)
        shutil.rmtree(tmp)  # an earlier, interrupted generation (check_target made sure)
    tmp.mkdir(parents=True)
    with (tmp / PARTIAL_MARKER).open("w") as claim:
        _claim(claim, root, where)  # held while writing: a second generator is refused, not raced
        claim.write(json.dumps({"pid": os.getpid(), "config": cfg.__dict__}, sort_keys=True))
        claim.flush()
        for c in range(cfg.classes):
            (tmp / f"class_{c:03d}").mkdir()
        ext = "jpg" if cfg.format == "jpeg" else "png"
        for i in range(cfg.images):
            pixels, label = render(cfg, i)
            data = encode(pixels)
            (tmp / f"class_{label:03d}" / f"img_{i:06d}.{ext}").write_bytes(data)
            if progress is not None:
                progress(i + 1, cfg.images)
        (tmp / COMPLETE_MARKER).write_text(json.dumps(cfg.__dict__, sort_keys=True))
        if is_complete(root, cfg):  # another pipeprof finished the same set meanwhile
            shutil.rmtree(tmp)
            return root
        check_target(root, cfg, where)  # the folder may have changed while we wrote
        if root.is_dir() and not root.is_symlink():
            if any(root.iterdir()):
                shutil.rmtree(root)  # pipeprof's own dataset for another config
            else:
                root.rmdir()
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(root)
    (root / PARTIAL_MARKER).unlink()
    return root
