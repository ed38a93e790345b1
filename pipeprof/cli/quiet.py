"""TensorFlow's import, with its native start-up lines kept off the terminal.

TensorFlow 2.21 writes two lines twice when it loads (absl's "before InitializeLog" notice and
oneDNN's), from C++ before its log level is read, so ``TF_CPP_MIN_LOG_LEVEL`` cannot hold them
back. The command-line process imports TensorFlow only for side jobs (a dataset's checks,
generating images, the stage benchmark): there the lines would sit between pipeprof's own
output and its one-line errors. A finder on ``sys.meta_path`` hands the import system
TensorFlow's own spec with its loader wrapped, so that file descriptor 2 points at a temporary
file while the package executes: dropped when the import succeeds, written to stderr when it
fails. Ranks (``pipeprof rank`` among them), whose logs keep everything, never install it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import tempfile
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
        try:
            saved = os.dup(2)
        except OSError:  # no stderr to keep quiet
            self.loader.exec_module(module)
            return
        with tempfile.TemporaryFile() as held:
            failed = True
            try:
                os.dup2(held.fileno(), 2)
                self.loader.exec_module(module)
                failed = False
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                if failed:  # what TensorFlow said before it failed is the user's to read
                    held.seek(0)
                    sys.stderr.write(held.read().decode(errors="replace"))


class _QuietTensorflow(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.busy = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        # asked again only while tensorflow is not imported (a probe's find_spec among them)
        if fullname != "tensorflow" or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)  # the other finders'
        finally:
            self.busy = False
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Quiet ``import tensorflow`` in this process (idempotent)."""
    if "tensorflow" in sys.modules:
        return
    if not any(isinstance(f, _QuietTensorflow) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorflow())
