"""The command line: usage mistakes are one line on stderr and exit 2, never a traceback."""

import pytest

from pipeprof.cli.common import overrides_from_args
from pipeprof.cli.main import build_parser, main


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["compare", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["compare", "--np", "two"], "--np 'two'"),
        (["compare", "--prefetch", "lots"], "autotune"),
        (["compare", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
        (["compare", "--set", "train.nope=1"], "train.nope"),
        (["compare", "--np", "1,100000"], "--oversubscribe"),
        (["compare", "--cache", "disk"], "invalid choice: 'disk'"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeprof: error:") and needle in lines[0], err
    assert "Traceback" not in err


def test_flags_become_overrides_that_beat_the_file():
    args = build_parser().parse_args(
        [
            "compare",
            "--np",
            "4",
            "--no-augment",
            "--cache",
            "file",
            "--prefetch",
            "3",
            "--steps",
            "7",
            "--shard-then-shuffle",
            "--mpi",
            "--set",
            "pipeline.augment.rotation_deg=45",
        ]
    )
    got = {".".join(k): v for k, v in overrides_from_args(args)}
    assert got == {
        "pipeline.augment.rotation_deg": 45,
        "pipeline.augment.enabled": False,
        "pipeline.shuffle.files_before_shard": False,
        "train.measure_steps": 7,
        "pipeline.cache.enabled": True,
        "pipeline.cache.kind": "file",
        "pipeline.prefetch.enabled": True,
        "pipeline.prefetch.depth": 3,
        "launch.controller": "mpi",
        "launch.np": [1, 2, 4],
    }


def test_help_lists_compare(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "compare" in capsys.readouterr().out
