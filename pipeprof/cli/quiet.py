"""TensorFlow's import, with its native start-up lines kept off the terminal.

TensorFlow 2.21 writes two lines twice when it loads (absl's "before InitializeLog" notice and
oneDNN's), from C++ before its log level is read, so ``TF_CPP_MIN_LOG_LEVEL`` cannot hold them
back. The command-line process imports TensorFlow only for side jobs (a dataset's checks,
generating images, the stage benchmark): there the lines would sit between pipeprof's own
output and its one-line errors. A finder on ``sys.meta_path`` hands the import system
TensorFlow's own spec with its loader wrapped, so that file descriptor 2 points at
``/dev/null`` while the package executes; the ranks, whose logs keep everything, never install
it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:  # resources, file names: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        sys.stderr.flush()
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
            self.loader.exec_module(module)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(null)


class _QuietTensorflow(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname != "tensorflow":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]  # once
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Quiet the first ``import tensorflow`` of this process (idempotent)."""
    if "tensorflow" in sys.modules:
        return
    if not any(isinstance(f, _QuietTensorflow) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorflow())
