"""The scenario key reference, written from the schema itself.

Every key, its default and its comment come from the dataclasses in ``scenario.py`` (a
field's comment is the one on its line, or the comment lines just above it), so the
reference cannot drift from the code: ``docs/scenario-keys.md`` is this module's output,
and a unit test fails when the two differ. Regenerate it with

    .venv/bin/python -m pipeprof.scenario_keys > docs/scenario-keys.md
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
import typing
from typing import Any, Literal, get_args, get_origin

from pipeprof import scenario as schema

HEADER = """# Scenario keys

Every key a scenario file may set, with its default and what it means. Precedence is
defaults < scenario file < `--overlay` files < `--set key=value` (and the flags that stand
for common keys). This page is written from `pipeprof/scenario.py` by
`python -m pipeprof.scenario_keys`; a test fails when the two differ.

"""
NOT_KEYS = {"source_file"}
COMMENT_COLUMN = 34
WIDTH = 92


def _comments(cls: type) -> dict[str, str]:
    """Field name -> its comment in the class's source (trailing, else the lines above)."""
    lines, _ = inspect.getsourcelines(cls)
    out: dict[str, str] = {}
    above: list[str] = []
    for line in lines:
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("# ").rstrip())
            continue
        m = re.match(r"(\w+)\s*:", text)
        if m and not text.startswith(("def ", "class ", "@")):
            trailing = text.split("  # ", 1)[1].strip() if "  # " in text else ""
            out[m.group(1)] = trailing or " ".join(above)
        above = []
    return out


def _choices(annotation: Any) -> list[str]:
    """The allowed values of a Literal, or of a Union of Literals and an integer."""
    if get_origin(annotation) is Literal:
        return [str(a) for a in get_args(annotation)]
    if get_origin(annotation) is typing.Union:
        return [
            c for a in get_args(annotation) for c in (["an integer"] if a is int else _choices(a))
        ]
    return []


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return repr(v)


def _line(name: str, value: Any, comment: str) -> list[str]:
    head = f"{name} = {_value(value)}"
    if not comment:
        return [head]
    if max(len(head), COMMENT_COLUMN) + 2 + len(comment) <= WIDTH:
        return [f"{head:<{COMMENT_COLUMN}}# {comment}"]
    return ["# " + part for part in textwrap.wrap(comment, WIDTH - 2)] + [head]


def _section(cls: type, instance: Any, path: str, out: list[str]) -> None:
    hints = typing.get_type_hints(cls, vars(schema), include_extras=True)
    comments = _comments(cls)
    nested = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name in NOT_KEYS:
            continue
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            nested.append(f)
            continue
        if f.name == "variants":
            continue  # an array of tables: written after the plain sections
        comment = comments.get(f.name, "")
        choices = _choices(hints[f.name])
        if choices and " | ".join(choices) not in comment:
            comment = " | ".join(choices) + (f": {comment}" if comment else "")
        body += _line(f.name, value, comment)
    if body:
        if path:
            out.append(f"[{path}]")
        out += body
    for f in nested:
        _section(
            type(getattr(instance, f.name)),
            getattr(instance, f.name),
            f"{path}.{f.name}".lstrip("."),
            out,
        )


def reference() -> str:
    """The scenario file with every key at its default, as TOML with comments."""
    out: list[str] = []
    _section(schema.Scenario, schema.Scenario(), "", out)
    variant = schema.VariantConfig()
    comments = _comments(schema.VariantConfig)
    out += [
        "",
        '# real variants, each run after the synthetic twin ("synthetic" is always run first);',
        "# a variant's [variants.pipeline] overrides any subset of [pipeline]",
        "[[variants]]",
    ] + _line("name", variant.name, comments.get("name", ""))
    out += ["[[variants]]", 'name = "no-augment"', "[variants.pipeline.augment]", "enabled = false"]
    return "\n".join(out) + "\n"


def document() -> str:
    return HEADER + "```toml\n" + reference() + "```\n"


if __name__ == "__main__":
    print(document(), end="")
