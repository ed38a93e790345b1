"""Where a scenario's data is, made ready before a launch: the built-in set generated on first
use (only into a folder that is missing, empty or pipeprof's own), a user's folder checked,
and every path pipeprof would write outside its run directory claimed first."""

from __future__ import annotations

from pathlib import Path

from pipeprof.data import filecache, generate
from pipeprof.errors import PipeprofError
from pipeprof.reporting import Reporter
from pipeprof.scenario import Scenario


def resolve_data_path(scenario: Scenario, path: str) -> Path:
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists() or not scenario.source_file:
        return p.resolve() if p.exists() else p
    return (Path(scenario.source_file).parent / p).resolve()


def claim_file_caches(scenario: Scenario) -> None:
    """A file cache at a user's prefix must be pipeprof's to write (data.filecache), or is refused now."""
    pipes = [scenario.pipeline] + [scenario.variant_pipeline(v) for v in scenario.variants]
    for prefix in dict.fromkeys(filecache.user_prefix(p) for p in pipes):
        if prefix:
            filecache.claim(prefix, scenario.source_file or "scenario")


def prepare_data(scenario: Scenario, reporter: Reporter) -> str:
    """Make sure the data is there (generating the built-in set on first use); return its root.
    Paths pipeprof will write outside its run directory are checked first (never a user's files)."""
    claim_file_caches(scenario)
    data = scenario.data
    if data.source == "factory":
        return ""
    if data.source == "generated":
        root = generate.dataset_dir(
            data.generate, str(resolve_data_path(scenario, data.path)) if data.path else ""
        )
        if not generate.is_complete(root, data.generate):
            where = f"{scenario.source_file or 'scenario'}: data.path" if data.path else ""
            generate.check_target(
                root, data.generate, where
            )  # a user's folder is refused before any output
            reporter.message(
                f"generating {data.generate.images} {data.generate.format.upper()} images "
                f"({data.generate.size}px, {data.generate.classes} classes) in {root}"
            )
            generate.generate(data.generate, root, progress=reporter.data_progress, where=where)
        return str(root)
    root = resolve_data_path(scenario, data.path)
    if data.source == "folder" and not root.is_dir():
        raise PipeprofError(
            f"{scenario.source_file or 'scenario'}: data.path '{data.path}' is not a directory"
        )
    return str(root) if data.source == "folder" else (str(root) if root.exists() else data.path)
