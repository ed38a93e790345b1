"""Typed configuration from TOML: plain dicts checked against dataclass type hints.

Every problem is a one-line PipeprofError naming the file and the dotted key. Overrides
(``--set a.b=1``, ``--overlay fragment.toml``) are dotted-key edits applied before checking,
so they go through the same validation as the file.
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, cast

from pipeprof.errors import PipeprofError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

NOT_TOML_KEYS = {"source_file"}

D = TypeVar("D", bound="DataclassInstance")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, where: str, key: str) -> Any:
    """Check ``value`` against type ``tp``; return it (converted where lossless)."""
    origin = typing.get_origin(tp)

    def bad() -> PipeprofError:
        return PipeprofError(
            f"{where}: {key} must be {_type_name(tp)}, got {type(value).__name__} {value!r}"
        )

    if tp is type(None):  # the None of an "X | None" field
        if value is not None:
            raise bad()
        return None
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise bad()
        return build(cast(type[Any], tp), value, where, key)
    if origin is Literal:
        if value not in typing.get_args(tp) or isinstance(value, bool) != any(
            isinstance(a, bool) for a in typing.get_args(tp)
        ):
            raise bad()
        return value
    if origin in (Union, types.UnionType):
        for arm in typing.get_args(tp):
            try:
                return _coerce(arm, value, where, key)
            except PipeprofError:
                continue
        raise bad()
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise bad()
        return [_coerce(item_tp, v, where, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise bad()
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise bad()
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad()
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad()
        return value
    raise TypeError(f"field type {tp!r} is not supported")  # a bug in this module


def build(
    cls: type[D], data: dict[str, Any], where: str, prefix: str, *, ignore_unknown: bool = False
) -> D:
    """A dataclass from plain data, every value checked against its field's type: the one
    schema mechanism for scenarios and for the records that cross processes. An unknown key
    is an error naming it, or skipped with ``ignore_unknown`` (records written by a newer
    pipeprof)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in NOT_TOML_KEYS]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if key not in names:
            if ignore_unknown:
                continue
            raise PipeprofError(f"{where}: unknown key '{dotted}' (known here: {', '.join(names)})")
        kwargs[key] = _coerce(hints[key], value, where, dotted)
    return cls(**kwargs)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` → (["a","b","c"], value); the value is read as TOML, else as a string."""
    if "=" not in text:
        raise PipeprofError(
            f"--set {text!r}: expected KEY=VALUE, e.g. pipeline.shuffle.buffer_size=512"
        )
    key, raw = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def overlay_overrides(path: str) -> list[tuple[list[str], Any]]:
    """A TOML fragment (e.g. written by ``pipeprof tune``) as dotted-key overrides."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PipeprofError(f"--overlay {path}: file does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise PipeprofError(f"--overlay {path}: not valid TOML: {exc}") from None

    def flatten(d: dict[str, Any], prefix: list[str]) -> list[tuple[list[str], Any]]:
        out = []
        for k, v in d.items():
            out += flatten(v, prefix + [k]) if isinstance(v, dict) else [(prefix + [k], v)]
        return out

    return flatten(raw, [])


def apply_overrides(raw: dict[str, Any], overrides: list[tuple[list[str], Any]]) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    for path, value in overrides:
        node = out
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise PipeprofError(f"override {'.'.join(path)}: '{part}' is not a table")
            node = nxt
        node[path[-1]] = value
    return out
