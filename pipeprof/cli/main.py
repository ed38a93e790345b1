"""The ``pipeprof`` command: ``main(argv) -> exit code``. Each subcommand is one module."""

from __future__ import annotations

import argparse
import errno
import sys

from pipeprof import __version__
from pipeprof.cli import quiet
from pipeprof.errors import PipeprofError
from pipeprof.launch import signals


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is a PipeprofError (one line, exit 2), not usage + exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise PipeprofError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    from pipeprof.cli import compare, diff, doctor, predict, rank, report, run, tune, watch

    parser = _Parser(
        prog="pipeprof",
        description="Input-pipeline bottleneck profiler for Horovod Keras training.",
    )
    parser.add_argument("--version", action="version", version=f"pipeprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    compare.add_parser(sub)
    run.add_parser(sub)
    tune.add_parser(sub)
    predict.add_parser(sub)
    watch.add_parser(sub)
    doctor.add_parser(sub)
    report.add_parser(sub)
    diff.add_parser(sub)
    rank.add_parser(sub)
    return parser


def split_script(argv: list[str]) -> tuple[list[str], list[str]]:
    """``pipeprof compare [OPTIONS] -- python train.py ARGS``: pipeprof's options, and the
    user's command (which ``watch`` takes after ``--`` itself)."""
    if argv[:1] == ["compare"] and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # TensorFlow's native start-up lines stay off the terminal: pipeprof's output and errors
    # stay one line each (quiet.py says why a log level cannot do it); a rank's log keeps them
    if argv[:1] != ["rank"]:
        quiet.install()
    # SIGINT, SIGTERM and SIGHUP: the first stops the children and keeps what was measured
    # (the workflows turn it into a failure that exits 128 + signum), a second forces the exit
    with signals.handled():
        try:
            parser = build_parser()
            argv_opts, script = split_script(argv)
            args = parser.parse_args(argv_opts)
            args.script_cmd = script
            if not getattr(args, "run", None):
                parser.print_help()
                return 2
            return int(args.run(args, argv))
        except PipeprofError as exc:
            print(f"pipeprof: error: {exc.message}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt as exc:  # a signal before anything was measured
            signum = signals.signum_of(exc)
            print(f"pipeprof: interrupted by {signals.signal_name(signum)}", file=sys.stderr)
            return signals.exit_code(signum)
        except OSError as exc:  # SIGHUP: the terminal is gone, so printing the results failed
            if signals.received() is None or exc.errno not in (errno.EIO, errno.EPIPE):
                raise
            return signals.exit_code(signals.received())  # type: ignore[arg-type]


def entry() -> None:
    sys.exit(main())
