"""Never destroy what pipeprof did not make: generated data, its scratch folder, file caches,
run directories. Each test leaves a user's file where pipeprof might write and checks it survives."""

import json
import os
from pathlib import Path

import pytest

from pipeprof import atomic
from pipeprof import scenario as scen
from pipeprof.data import filecache
from pipeprof.data import generate as gen
from pipeprof.errors import PipeprofError
from pipeprof.reporting import Reporter
from pipeprof.rundir import RunDir
from pipeprof.scenario import GenerateConfig
from pipeprof.workflows.data import prepare_data

SMALL = GenerateConfig(images=6, size=16, classes=2)
PRECIOUS = b"a user's thesis, not pipeprof's\n\x00\xff"


def user_file(folder: Path, name: str = "thesis.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(PRECIOUS)
    return folder / name


def generated_scenario(tmp_path: Path, data_path: str) -> scen.Scenario:
    toml = tmp_path / "gen.toml"
    toml.write_text(
        f'name = "gen"\n[data]\nsource = "generated"\npath = "{data_path}"\nnum_classes = 2\n'
        "[data.generate]\nimages = 6\nsize = 16\nclasses = 2\n"
    )
    return scen.load(str(toml))


def refusal(fn, *args, **kw) -> str:
    with pytest.raises(PipeprofError) as exc:
        fn(*args, **kw)
    assert "\n" not in exc.value.message
    return exc.value.message


def test_a_folder_holding_a_users_file_is_refused_as_generated_data_path(tmp_path):
    keep = user_file(tmp_path / "mine")
    s = generated_scenario(tmp_path, str(tmp_path / "mine"))
    msg = refusal(prepare_data, s, Reporter())
    assert str(tmp_path / "mine") in msg and "data.path" in msg and "thesis.txt" in msg
    assert keep.read_bytes() == PRECIOUS and sorted(os.listdir(tmp_path / "mine")) == ["thesis.txt"]
    assert not (tmp_path / "mine.partial").exists()  # refused before anything was written
    refusal(gen.generate, SMALL, tmp_path / "mine")  # the library call refuses too
    assert keep.read_bytes() == PRECIOUS


def test_data_path_dot_is_refused_and_the_working_directory_survives(tmp_path, monkeypatch):
    work = tmp_path / "project"
    keep = user_file(work, "train.py")
    monkeypatch.chdir(work)
    s = generated_scenario(tmp_path, ".")
    assert str(work) in refusal(prepare_data, s, Reporter())
    assert str(work) in refusal(gen.generate, SMALL, Path("."))
    assert keep.read_bytes() == PRECIOUS and sorted(os.listdir(work)) == ["train.py"]
    assert sorted(os.listdir(tmp_path)) == ["gen.toml", "project"]  # no project.partial either


def test_a_partial_folder_pipeprof_did_not_make_is_refused(tmp_path):
    keep = user_file(tmp_path / "data.partial")
    msg = refusal(gen.generate, SMALL, tmp_path / "data")
    assert str(tmp_path / "data.partial") in msg
    assert keep.read_bytes() == PRECIOUS and not (tmp_path / "data").exists()


def test_a_stale_partial_pipeprof_made_is_cleaned_and_regenerated(tmp_path):
    stale = tmp_path / "data.partial"
    (stale / "class_000").mkdir(parents=True)
    (stale / gen.PARTIAL_MARKER).write_text("{}")
    (stale / "class_000" / "img_000000.jpg").write_bytes(
        b"\xff\xd8 cut short"
    )  # an interrupted run's
    root = gen.generate(SMALL, tmp_path / "data")
    assert gen.is_complete(root, SMALL) and not stale.exists()
    assert sorted(p.name for p in root.rglob("*.jpg")) == [f"img_{i:06d}.jpg" for i in range(6)]
    assert not (root / gen.PARTIAL_MARKER).exists()


def test_a_dataset_pipeprof_made_for_another_config_is_regenerated(tmp_path):
    old = GenerateConfig(images=4, size=16, classes=2, seed=1)
    root = gen.generate(old, tmp_path / "data")
    gen.generate(SMALL, root)
    assert gen.is_complete(root, SMALL) and not gen.is_complete(root, old)
    assert len(list(root.rglob("*.jpg"))) == 6 and not (tmp_path / "data.partial").exists()


def test_a_users_file_inside_a_pipeprof_dataset_stops_its_replacement(tmp_path):
    root = gen.generate(GenerateConfig(images=4, size=16, classes=2, seed=1), tmp_path / "data")
    keep = user_file(root / "class_000", "notes.txt")
    assert "class_000/notes.txt" in refusal(gen.generate, SMALL, root)
    assert keep.read_bytes() == PRECIOUS


def test_an_empty_folder_is_filled(tmp_path):
    (tmp_path / "empty").mkdir()
    assert gen.is_complete(gen.generate(SMALL, tmp_path / "empty"), SMALL)


def test_a_file_cache_prefix_with_files_pipeprof_did_not_make_is_refused(tmp_path):
    prefix = str(tmp_path / "cache" / "train")
    keep = user_file(tmp_path / "cache", "train-shard0of1.index")
    assert "train-shard0of1.index" in refusal(filecache.claim, prefix, "s.toml")
    assert keep.read_bytes() == PRECIOUS and not filecache.marker(prefix).exists()


def test_a_fresh_file_cache_prefix_is_claimed_and_stays_pipeprofs(tmp_path):
    prefix = str(tmp_path / "cache" / "train")
    filecache.claim(prefix, "s.toml")
    assert json.loads(filecache.marker(prefix).read_text())["made_by"] == "pipeprof"
    (tmp_path / "cache" / "train-shard0of1.index").write_bytes(b"tf.data's")  # what the run leaves
    filecache.claim(prefix, "s.toml")  # the next run may use its own cache


def test_compare_checks_a_scenarios_file_cache_before_anything_runs(tmp_path):
    keep = user_file(tmp_path / "c", "x-shard0of2.index")
    toml = tmp_path / "s.toml"
    toml.write_text(
        f'name = "c"\n[data]\nsource = "factory"\nfactory = "m:f"\n'
        f'[pipeline.cache]\nenabled = true\nkind = "file"\npath = "{tmp_path / "c" / "x"}"\n'
    )
    msg = refusal(prepare_data, scen.load(str(toml)), Reporter())
    assert str(toml) in msg and "pipeline.cache.path" in msg
    assert keep.read_bytes() == PRECIOUS


def test_a_run_directory_is_never_a_users_file(tmp_path):
    keep = tmp_path / "out"
    keep.write_bytes(PRECIOUS)
    assert "not a directory" in refusal(RunDir.create, str(keep), "s")
    assert keep.read_bytes() == PRECIOUS


def test_results_are_written_whole(tmp_path):
    target = tmp_path / "summary.csv"
    target.write_text("old\n")
    atomic.write_text(target, "new\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["summary.csv"]


def test_image_header_reads_format_and_size_without_decoding(tmp_path):
    from pipeprof.data.files import image_header, stored_side

    # a baseline JPEG: SOI, an APP0 segment, then the frame header (SOF0) with height 300, width 400
    app0 = b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = (
        b"\xff\xc0\x00\x11\x08"
        + (300).to_bytes(2, "big")
        + (400).to_bytes(2, "big")
        + b"\x03"
        + bytes(9)
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"\xff\xd8" + app0 + sof0 + b"\xff\xd9")
    png = (
        b"\x89PNG\r\n\x1a\n"
        + b"\x00\x00\x00\rIHDR"
        + (640).to_bytes(4, "big")
        + (480).to_bytes(4, "big")
        + bytes(5)
    )
    (tmp_path / "a" / "y.png").write_bytes(png)
    (tmp_path / "a" / "z.jpg").write_bytes(b"not an image")
    assert image_header(tmp_path / "a" / "x.jpg") == ("jpeg", 400, 300)
    assert image_header(tmp_path / "a" / "y.png") == ("png", 640, 480)
    assert image_header(tmp_path / "a" / "z.jpg") is None
    assert stored_side(tmp_path) == ("mixed", 300)
    (tmp_path / "a" / "y.png").unlink()
    assert stored_side(tmp_path) == ("jpeg", 300)


def test_an_empty_data_dir_variable_means_the_cache_not_the_current_folder(monkeypatch):
    from pathlib import Path

    from pipeprof.data.generate import default_root

    cache = Path.home() / ".cache" / "pipeprof" / "datasets"
    monkeypatch.delenv("PIPEPROF_DATA_DIR", raising=False)
    assert default_root() == cache
    # what `export PIPEPROF_DATA_DIR=$(a command that printed nothing)` sets
    monkeypatch.setenv("PIPEPROF_DATA_DIR", "")
    assert default_root() == cache
    monkeypatch.setenv("PIPEPROF_DATA_DIR", "/srv/datasets")
    assert default_root() == Path("/srv/datasets")
