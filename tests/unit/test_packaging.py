"""Installable anywhere: the built-in scenarios ship inside the package, not beside it."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from pipeprof import scenario as scen

REPO = Path(__file__).resolve().parents[2]
BUILTINS = sorted(p.name for p in (REPO / "pipeprof" / "scenarios").glob("*.toml"))


def test_the_repository_scenarios_folder_is_the_package_one():
    # the README's `pipeprof compare scenarios/quickstart.toml` keeps working from a checkout
    assert (REPO / "scenarios").is_symlink() and (
        REPO / "scenarios"
    ).resolve() == scen.BUILTIN_SCENARIOS
    assert "quickstart.toml" in BUILTINS and (REPO / "scenarios" / "quickstart.toml").is_file()


def test_a_built_wheel_carries_every_builtin_scenario(tmp_path):
    # built from a copy, so the build's scratch files never land in the shared checkout
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "pipeprof", src / "pipeprof", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("pipeprof-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"pipeprof/scenarios/{n}" for n in BUILTINS} <= names


def test_a_builtin_loads_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = scen.load("quickstart")
    assert s.name == "quickstart"
    assert Path(s.source_file).parent == scen.BUILTIN_SCENARIOS
