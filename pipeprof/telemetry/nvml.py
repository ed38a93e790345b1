"""Every NVML call goes through here.

``Nvml.query`` returns ``NA`` instead of raising: a query the driver does not support is
logged once and answers NA from then on; no driver library or no GPU leaves ``available``
false with a reason, and everything else in pipeprof works on. The backend is the
``pynvml`` module from nvidia-ml-py, or any object with the same functions (tests pass a fake).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("pipeprof.nvml")


class _NotAvailable:
    """The value of a query NVML cannot answer. Falsy; prints as 'n/a'."""

    _instance = None

    def __new__(cls) -> _NotAvailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "n/a"


NA: Any = _NotAvailable()


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


class Nvml:
    def __init__(self, backend: Any | None = None) -> None:
        self._lib = backend
        self.available = False
        self.reason = ""
        self._unsupported: set[str] = set()
        try:
            if self._lib is None:
                self._lib = _load_pynvml()
            self._lib.nvmlInit()
            self.available = True
        except ImportError:
            self.reason = "no NVML on this host (nvidia-ml-py is not installed)"
        except (
            Exception
        ) as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: any means no NVML
            self.reason = f"no NVML on this host ({_describe(exc)})"
        if not self.available:
            log.info(self.reason)

    def query(self, fn_name: str, *args: Any) -> Any:
        """Call ``pynvml.<fn_name>(*args)``; NA if NVML or this query is unavailable."""
        if not self.available or fn_name in self._unsupported:
            return NA
        fn: Callable[..., Any] | None = getattr(self._lib, fn_name, None)
        if fn is None:
            self._mark_unsupported(fn_name, "not in this nvidia-ml-py")
            return NA
        try:
            return fn(*args)
        except Exception as exc:  # NVMLError subclasses; the driver decides which queries work
            if _is_not_supported(self._lib, exc):
                self._mark_unsupported(fn_name, _describe(exc))
            else:
                log.warning("NVML %s failed: %s", fn_name, _describe(exc))
            return NA

    def _mark_unsupported(self, fn_name: str, why: str) -> None:
        self._unsupported.add(fn_name)
        log.warning(
            "NVML %s is not available on this driver (%s); reported as n/a from now on",
            fn_name,
            why,
        )

    def device_count(self) -> int:
        n = self.query("nvmlDeviceGetCount")
        return 0 if n is NA else int(n)

    def inventory(self) -> list[dict[str, Any]]:
        """Name, UUID and memory of each GPU, for the run manifest."""
        out = []
        for i in range(self.device_count()):
            h = self.query("nvmlDeviceGetHandleByIndex", i)
            if h is NA:
                continue
            mem = self.query("nvmlDeviceGetMemoryInfo", h)
            out.append(
                {
                    "index": i,
                    "name": _text(self.query("nvmlDeviceGetName", h)),
                    "uuid": _text(self.query("nvmlDeviceGetUUID", h)),
                    "memory_total_mb": None if mem is NA else round(mem.total / 2**20),
                }
            )
        return out

    def shutdown(self) -> None:
        if self.available:
            self.query("nvmlShutdown")
            self.available = False


def _text(value: Any) -> Any:
    if value is NA:
        return None
    return value.decode() if isinstance(value, bytes) else value


def _describe(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _is_not_supported(lib: Any, exc: BaseException) -> bool:
    code = getattr(exc, "value", None)
    return code is not None and code == getattr(lib, "NVML_ERROR_NOT_SUPPORTED", 3)
