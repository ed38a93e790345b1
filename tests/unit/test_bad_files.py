"""Bad files are named, counted and skipped: the rules (data.check) on real encoded images,
the in-graph version held to the same verdicts, the TFRecord framing scan, the run
directory's bad-file logs, and doctor's data checks."""

import os
from pathlib import Path

import pandas as pd
import pytest
import tensorflow as tf

from pipeprof import doctor
from pipeprof import scenario as scen
from pipeprof.analysis.badfiles import add_bad_files, bad_files_warning
from pipeprof.data import badfiles, check
from pipeprof.data.check import Bad
from pipeprof.data.files import scan_image_folder
from pipeprof.errors import PipeprofError


def _pixels(side: int = 32, seed: int = 0) -> tf.Tensor:
    return tf.cast(
        tf.random.stateless_uniform([side, side, 3], [seed, 1], 0, 255, tf.int32), tf.uint8
    )


JPEG = tf.io.encode_jpeg(_pixels()).numpy()
PNG = tf.io.encode_png(_pixels(seed=1)).numpy()

CASES = {
    "good.jpg": (JPEG, Bad.OK),
    "good.png": (PNG, Bad.OK),
    "padded.jpg": (JPEG + b"\x00" * 100, Bad.OK),  # zero padding after the end marker
    "png-named.jpg": (PNG, Bad.OK),  # decode_image reads the content, whatever the name says
    "truncated.jpg": (JPEG[: len(JPEG) // 2], Bad.TRUNCATED_JPEG),
    "no-eoi.jpg": (JPEG[:-2], Bad.TRUNCATED_JPEG),
    "truncated.png": (PNG[:-20], Bad.TRUNCATED_PNG),
    "empty.png": (b"", Bad.EMPTY),
    "text.jpg": (b"this is a text file, not a JPEG\n", Bad.NOT_AN_IMAGE),
    "gif.jpg": (b"GIF89a" + b"\x00" * 20, Bad.OK),
}


def test_real_images_get_the_verdicts_their_bytes_deserve(tmp_path):
    for name, (data, expected) in CASES.items():
        (tmp_path / name).write_bytes(data)
        verdict = check.check_file(tmp_path / name)
        assert verdict.code == expected, name
        assert verdict.size == len(data)
        assert (verdict.reason == "") == (expected == Bad.OK)
    assert "truncated JPEG" in check.check_file(tmp_path / "truncated.jpg").reason
    assert check.check_file(tmp_path / "missing.jpg").code == Bad.UNREADABLE


def test_the_decoder_agrees_with_the_verdicts():
    """What the checks pass, TensorFlow decodes; what they refuse, it cannot."""
    for name, (data, expected) in CASES.items():
        if name == "gif.jpg":
            continue  # a header without an image: only the signature is checked for GIF and BMP
        try:
            tf.io.decode_image(data, channels=3, expand_animations=False)
            decoded = True
        except tf.errors.InvalidArgumentError:
            decoded = False
        assert decoded == (expected == Bad.OK), name


def test_in_graph_checks_match_the_python_rules():
    from pipeprof.data.screen import image_check

    datas = [d for d, _ in CASES.values()] + [
        b"\xff\xd8\xff",
        b"\x89PNG\r\n\x1a\n",
        b"BM",
        b"x" * 1000 + JPEG[-2:],
    ]
    codes = image_check(tf.constant(datas)).numpy()
    assert [int(c) for c in codes] == [int(check.check_data(d)) for d in datas]


def test_unreadable_entries_are_set_apart_when_listing(tmp_path):
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        (tmp_path / c / "x.jpg").write_bytes(JPEG)
    os.symlink(tmp_path / "nowhere.jpg", tmp_path / "a" / "dangling.jpg")
    (tmp_path / "b" / "folder.jpg").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("not listed: no image extension")
    listing = scan_image_folder(tmp_path)
    assert listing.classes == ["a", "b"]
    assert listing.files == [str(tmp_path / "a" / "x.jpg"), str(tmp_path / "b" / "x.jpg")]
    assert dict(listing.unreadable) == {
        str(tmp_path / "a" / "dangling.jpg"): "unreadable: a link to nothing",
        str(tmp_path / "b" / "folder.jpg"): "unreadable: not a regular file",
    }


def test_crc32c_and_the_tfrecord_framing_scan(tmp_path):
    assert check.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    good = tmp_path / "good.tfrecord"
    with tf.io.TFRecordWriter(str(good)) as w:
        for i in range(5):
            w.write(b"record %d" % i)
    assert check.scan_tfrecord(good) == (5, None)
    raw = good.read_bytes()
    (tmp_path / "cut.tfrecord").write_bytes(raw[:-3])
    n, problem = check.scan_tfrecord(tmp_path / "cut.tfrecord")
    assert n == 4 and problem.startswith("truncated: record 4")
    broken = bytearray(raw)
    broken[len(raw) // 5 + 2] ^= 0xFF  # inside the second record's length
    (tmp_path / "broken.tfrecord").write_bytes(bytes(broken))
    n, problem = check.scan_tfrecord(tmp_path / "broken.tfrecord")
    assert n == 1 and "fails its checksum" in problem


def test_bad_file_logs_merge_into_a_column_and_a_warning(tmp_path):
    for rank in (0, 1):
        sink = badfiles.BadFiles(
            badfiles.log_path(tmp_path, 2, "no-augment", rank), variant="no-augment"
        )
        sink.add("/d/a/1.jpg", "empty file (0 bytes)")
        sink.add("/d/a/1.jpg", "empty file (0 bytes)")  # met again in a later epoch: once
        sink.add(f"/d/b/{rank}.jpg", "truncated JPEG")
        assert sink.count == 2
    (tmp_path / "bad_files" / "np2-no-augment-rank1.jsonl").open("a").write(
        '{"path": "/d/cut'
    )  # a killed rank
    bad = badfiles.load(tmp_path)
    assert list(bad.columns) == badfiles.COLUMNS and len(bad) == 3
    assert set(bad["variant"]) == {"no-augment"} and set(bad["np"]) == {2}
    summary = pd.DataFrame(
        {
            "np": [2, 2, 2],
            "variant": ["synthetic", "real", "no-augment"],
            "synthetic": [True, False, False],
            "samples_per_s": [3.0, 2.0, 1.0],
            "verdict": ["", "x", "y"],
        }
    )
    out = add_bad_files(summary, bad)
    assert list(out.columns) == [
        "np",
        "variant",
        "synthetic",
        "samples_per_s",
        "bad_files",
        "verdict",
    ]
    assert pd.isna(out["bad_files"][0]) and list(out["bad_files"][1:]) == [0, 3]
    line = bad_files_warning(bad, "RUN/bad_files.csv")
    assert (
        "3 bad file(s) skipped (np=2 no-augment: 3)" in line
        and "/d/a/1.jpg (empty file (0 bytes))" in line
    )
    assert "\n" not in line and bad_files_warning(badfiles.load(tmp_path / "none"), "x") is None


def test_failure_lines_are_one_line_and_name_the_file():
    sink = badfiles.BadFiles(variant="real")
    badfiles.building("real")
    with pytest.raises(badfiles.BadFileError):
        sink.fail("/d/a/cut.jpg", "truncated JPEG")
    line = badfiles.failure_line(RuntimeError("wrapped by TensorFlow"))
    assert (
        line.startswith("variant real: bad file /d/a/cut.jpg: truncated JPEG")
        and "on_bad_file" in line
    )
    badfiles.building("real")  # a new pipeline: no failure yet

    class InvalidArgumentError(Exception):
        pass

    tf_text = (
        "{{function_node __wrapped__IteratorGetNext_output_types_2_device_/job:localhost/replica:0/task:0/"
        "device:CPU:0}} jpeg::Uncompress failed. Invalid JPEG data or crop window.\n\t [[{{node DecodeImage}}]]"
        " [Op:IteratorGetNext] name:"
    )
    line = badfiles.failure_line(InvalidArgumentError(tf_text))
    assert line.startswith("variant real: a file failed to decode past pipeprof's checks")
    assert "jpeg::Uncompress failed" in line and "function_node" not in line and "\n" not in line
    assert badfiles.failure_line(ValueError("unrelated")) is None


def test_on_bad_file_is_a_scenario_key(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('name = "s"\n')
    assert scen.load(str(toml)).data.on_bad_file == "skip"
    assert (
        scen.load(str(toml), [scen.parse_override('data.on_bad_file="fail"')]).data.on_bad_file
        == "fail"
    )
    with pytest.raises(PipeprofError, match="data.on_bad_file"):
        scen.load(str(toml), [scen.parse_override('data.on_bad_file="ignore"')])


def folder_scenario(tmp_path: Path, extra: str = "") -> scen.Scenario:
    root = tmp_path / "images"
    for c in ("cats", "dogs"):
        (root / c).mkdir(parents=True)
        for i in range(3):
            (root / c / f"{i}.jpg").write_bytes(JPEG)
    (root / "cats" / "cut.jpg").write_bytes(JPEG[:100])
    (root / "dogs" / "empty.png").write_bytes(b"")
    toml = tmp_path / "s.toml"
    toml.write_text(
        f'name = "s"\n[data]\nsource = "folder"\npath = "images"\nnum_classes = 2\n{extra}'
    )
    return scen.load(str(toml))


def test_doctor_lists_a_folders_bad_files(tmp_path):
    findings, bad = doctor.data_findings(folder_scenario(tmp_path))
    by = {f.what: f for f in findings}
    assert by["classes"].status == "ok" and by["files"].detail.startswith("8 image files")
    assert by["bad files"].status == "warn"  # skipped by default: not a failure
    assert [Path(p).name for p, _ in bad] == ["cut.jpg", "empty.png"]
    findings, _ = doctor.data_findings(folder_scenario(tmp_path / "f", 'on_bad_file = "fail"\n'))
    failed = [f for f in findings if f.status == "fail"]
    assert (
        len(failed) == 1
        and "cut.jpg" in failed[0].detail
        and "ends the run on the first" in failed[0].detail
    )


def test_doctor_says_generated_data_will_be_generated(tmp_path):
    toml = tmp_path / "g.toml"
    toml.write_text(
        f'name = "g"\n[data]\nsource = "generated"\npath = "{tmp_path / "later"}"\nnum_classes = 2\n'
        "[data.generate]\nimages = 4\nsize = 16\nclasses = 2\n"
    )
    findings, bad = doctor.data_findings(scen.load(str(toml)))
    assert [f.status for f in findings] == ["note"] and "will be written to" in findings[0].detail
    assert not (tmp_path / "later").exists() and bad == []


# a GPU cluster's build: NCCL for the tensors, Gloo to launch, no MPI
BUILD = {
    "frameworks": {"TensorFlow": True, "PyTorch": False, "MXNet": False},
    "controllers": {"MPI": False, "Gloo": True},
    "tensor operations": {"NCCL": True, "DDL": False, "CCL": False, "MPI": False, "Gloo": True},
}


def test_the_probe_reads_horovods_build_as_check_build_prints_it():
    # in a subprocess, as doctor does: the probe imports TensorFlow and horovod.tensorflow once
    probe = doctor.probe_frameworks()
    build = probe["horovod_build"]
    assert build["frameworks"] == {"TensorFlow": True, "PyTorch": False, "MXNet": False}
    assert (
        build["controllers"]["Gloo"] and build["tensor operations"]["Gloo"]
    )  # scripts/setup.sh builds Gloo


def test_doctor_fails_a_controller_the_scenario_needs_but_horovod_lacks(tmp_path):
    toml = tmp_path / "m.toml"
    toml.write_text('name = "m"\n[launch]\ncontroller = "mpi"\n')
    report = doctor.Report()
    doctor._horovod(report, "/x/horovodrun", BUILD, "", scen.load(str(toml)))
    assert [f.what for f in report.failures] == ["controller MPI"]


def test_the_launcher_reads_the_service_workers_bad_files_without_tensorflow(tmp_path):
    # Regression: collect_bad_files ran after every launch and imported TensorFlow (data.screen)
    # for a constant: 2.3 s of the launcher's time per compare, with or without a service.
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from pipeprof.scenario import DataConfig; "
        "from pipeprof.workflows.service_around_launch import collect_bad_files; "
        f"n = collect_bad_files(Path({str(tmp_path)!r}), 1, DataConfig()); "
        "print(n, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["0", "False"]
