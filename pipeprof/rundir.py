"""The run directory: the output contract that later features and users' scripts read, and
``RunDir``, the one object every reader and writer of it goes through.

    RUN_DIR/
      manifest.json      versions, host, CPU cores, GPUs, the resolved scenario, the command line
      steps/npN-VARIANT.csv   per-rank, per-step records (warm-up steps flagged)
      variants.jsonl     one line per (np, variant) run: batch sizes, learning rate, mean loss
      status.json        running, finished, failed or interrupted, and by which process
      summary.csv        one row per (np, variant): throughput ±95%, gap, efficiency, verdict
      model.json         the model's parameter and gradient sizes
      stages.csv, verdict.json, verdict.txt   the ablation's stage costs and verdicts
      script_stages.csv  a user script's transformations, each measured alone (compare --ablation -- CMD)
      prediction.csv, prediction.json         pipeprof predict's output
      trials.csv, tune.json, winner.toml, tfdata.py.txt or dataloader.py.txt   pipeprof tune's output
      bad_files.csv      the bad files skipped, per (np, variant)
      logs/              everything horovodrun (and the stage benchmark) printed
      live/, telemetry/  everything the ranks streamed while running (see telemetry.recorder)
      report.html, trace.json, tensorboard/   the renderers' output (pipeprof report)
"""

from __future__ import annotations

import csv
import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import pandas as pd

from pipeprof import __version__, atomic, host
from pipeprof.errors import PipeprofError
from pipeprof.records import STEP_COLUMNS, StepRecord, VariantRun


def _new_run_dir(out: str | None, scenario_name: str) -> Path:
    if out:
        path = Path(out)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path("runs") / f"{stamp}-{scenario_name}"
        n = 1
        while path.exists():
            n += 1
            path = Path("runs") / f"{stamp}-{scenario_name}-{n}"
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        what = (
            "directory exists and is not empty"
            if path.is_dir()
            else "exists and is not a directory"
        )
        raise PipeprofError(f"--out {path}: {what} (pipeprof never overwrites a run)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _version(*dists: str) -> str | None:
    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return None


def manifest(
    scenario: dict[str, Any], argv: list[str], gpus: list[dict[str, Any]], extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "pipeprof": __version__,
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
        "horovod": _version("horovod"),
        "keras": _version("keras"),
        "jax": _version("jax"),
        "torch": _version("torch"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_cores": host.usable_cores(),  # the cores this run could use (its CPU affinity)
        "gpus": gpus,
        "started_unix_s": time.time(),
        "command_line": [Path(sys.argv[0]).name, *argv],
        "scenario": scenario,
        **extra,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic.write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """Every float as Python writes it, which reads back to the same float. A rounded file (it
    once held 4 significant digits) disagrees with the terminal that printed the unrounded
    value: 43.6512 printed 43.7%, and the file's 43.65 reads back as 43.6%."""
    atomic.write_text(path, frame.to_csv(index=False))


def _read_csv(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None


def _with_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """Step files written before a column existed read as that column's default."""
    if "paired" not in frame.columns:
        frame["paired"] = ""
    if "round" not in frame.columns:
        frame["round"] = -1
    if "cpu_ms" not in frame.columns:
        frame["cpu_ms"] = float("nan")
    if "host" not in frame.columns:
        frame["host"] = ""
    if "learning_rate" not in frame.columns:
        frame["learning_rate"] = float("nan")
    frame["paired"] = frame["paired"].fillna("").astype(str)
    frame["host"] = frame["host"].fillna("").astype(str)
    return frame


# status.json's states
RUNNING, FINISHED, FAILED, INTERRUPTED = "running", "finished", "failed", "interrupted"
STOPPED = "stopped"  # read back for a run that says 'running' but whose process is gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunDir:
    """One run directory. ``RunDir.create(out, name)`` makes a new one (never an existing,
    non-empty one); ``RunDir(path)`` opens one to read. Readers get frames and dicts, or
    None where a file is absent; a file a reader cannot do without is a one-line error
    naming the directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, out: str | None, name: str) -> RunDir:
        return cls(_new_run_dir(out, name).resolve())

    def log_path(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    # --- reading ---------------------------------------------------------------------------

    def _require(self, name: str, what: str) -> Path:
        path = self.path / name
        if not path.exists():
            raise PipeprofError(
                f"{self.path}: no {name} ({what}); is this a pipeprof run directory?"
            )
        return path

    def manifest(self, what: str = "the run's manifest") -> dict[str, Any]:
        return cast(dict[str, Any], json.loads(self._require("manifest.json", what).read_text()))

    def summary(self, what: str = "the run's results") -> pd.DataFrame:
        return pd.read_csv(self._require("summary.csv", what))

    def steps(self, paired: bool = False) -> pd.DataFrame:
        """Step records: rank 0's complete files, plus streamed ones for any (np, variant) that
        never completed (an interrupted or failed launch), so what was measured is not lost.

        Synthetic steps measured in alternation with a real variant (``paired``) are left out
        unless asked for: only the gap computation needs them."""
        frames = [
            _with_defaults(f)
            for f in (_read_csv(p) for p in sorted((self.path / "steps").glob("np*.csv")))
            if f is not None
        ]
        done = (
            pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=STEP_COLUMNS)
        )
        live = _read_csv(self.path / "live" / "steps.csv")
        if live is not None and not live.empty:
            live = _with_defaults(live)
            have = set(zip(done["np"], done["variant"], done["paired"]))
            partial = live[
                [
                    (n, v, p) not in have
                    for n, v, p in zip(live["np"], live["variant"], live["paired"])
                ]
            ]
            if not partial.empty:
                done = (
                    pd.concat([done, partial[STEP_COLUMNS]], ignore_index=True)
                    if not done.empty
                    else partial[STEP_COLUMNS]
                )
        done = _with_defaults(done)
        return done if paired else done[done["paired"] == ""].reset_index(drop=True)

    def telemetry(self) -> dict[str, pd.DataFrame | None]:
        return {k: _read_csv(self.path / "telemetry" / f"{k}.csv") for k in ("gpu", "host", "proc")}

    def variant_runs(self) -> list[dict[str, Any]]:
        path = self.path / "variants.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def stages(self) -> pd.DataFrame | None:
        return _read_csv(self.path / "stages.csv")

    def script_stages(self) -> pd.DataFrame | None:
        """A user script's transformations measured alone (compare --ablation -- CMD)."""
        return _read_csv(self.path / "script_stages.csv")

    def status(self) -> dict[str, Any]:
        """How the run stands: ``state`` (running, finished, failed, interrupted; ``stopped``
        when it says running but its process on this host is gone; ``unknown`` for a run
        written before pipeprof kept a status) and ``detail``."""
        path = self.path / "status.json"
        if not path.exists():
            return {"state": "unknown", "detail": ""}
        status: dict[str, Any] = json.loads(path.read_text())
        if (
            status.get("state") == RUNNING
            and status.get("host") == socket.gethostname()
            and not _alive(int(status.get("pid", 0)))
        ):
            status = {**status, "state": STOPPED, "detail": "its process ended without saying how"}
        return status

    def _json(self, name: str) -> Any:
        path = self.path / name
        return json.loads(path.read_text()) if path.exists() else None

    def verdicts(self) -> list[dict[str, Any]]:
        return self._json("verdict.json") or []

    def prediction(self) -> pd.DataFrame | None:
        return _read_csv(self.path / "prediction.csv")

    def prediction_info(self) -> dict[str, Any]:
        return self._json("prediction.json") or {}

    def trials(self) -> pd.DataFrame | None:
        return _read_csv(self.path / "trials.csv")

    def tune_info(self) -> dict[str, Any]:
        return self._json("tune.json") or {}

    def bad_files(self) -> pd.DataFrame | None:
        return _read_csv(self.path / "bad_files.csv")

    def events(self) -> list[dict[str, Any]]:
        """What the ranks streamed besides steps and samples: hellos (rank, host, local rank),
        progress, bad files."""
        path = self.path / "live" / "events.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a run that was killed while writing it
        return out

    def load(self) -> Run:
        """Everything a renderer reads, in one object (one read of each file)."""
        manifest = self.manifest("the run's manifest")
        summary = _read_csv(self.path / "summary.csv")
        return Run(
            path=self.path,
            manifest=manifest,
            status=self.status(),
            summary=summary,
            steps=self.steps(paired=True),
            telemetry=self.telemetry(),
            variant_runs=self.variant_runs(),
            stages=self.stages(),
            script_stages=self.script_stages(),
            verdicts=self.verdicts(),
            prediction=self.prediction(),
            prediction_info=self.prediction_info(),
            trials=self.trials(),
            tune_info=self.tune_info(),
            model=self.model(),
            events=self.events(),
        )

    def model(self) -> dict[str, Any]:
        path = self.path / "model.json"
        return json.loads(path.read_text()) if path.exists() else {}

    # --- writing (whole files, atomically) -----------------------------------------------

    def write_variant_run(self, records: list[StepRecord], result: VariantRun) -> None:
        """Rank 0, once a variant is measured: every rank's steps of it, and its line in
        variants.jsonl (appended: one per variant, as they finish)."""
        path = self.path / "steps" / f"np{result.np}-{result.variant}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=STEP_COLUMNS)
            writer.writeheader()
            for r in records:
                writer.writerow(r.to_dict())
        tmp.replace(path)
        with (self.path / "variants.jsonl").open("a") as fh:
            fh.write(json.dumps(result.to_dict()) + "\n")

    def write_model(self, data: dict[str, Any]) -> None:
        write_json(self.path / "model.json", data)

    def write_script_stages(self, frame: pd.DataFrame) -> None:
        write_csv(self.path / "script_stages.csv", frame)

    def write_manifest(self, data: dict[str, Any]) -> None:
        write_json(self.path / "manifest.json", data)

    def write_status(self, state: str, detail: str = "") -> None:
        write_json(
            self.path / "status.json",
            {
                "state": state,
                "detail": detail,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "updated_unix_s": time.time(),
            },
        )

    def write_summary(self, frame: pd.DataFrame) -> None:
        write_csv(self.path / "summary.csv", frame)

    def write_bad_files(self, frame: pd.DataFrame) -> None:
        write_csv(self.path / "bad_files.csv", frame)

    def write_stages(self, frame: pd.DataFrame) -> None:
        write_csv(self.path / "stages.csv", frame)

    def write_verdicts(self, verdicts: list[dict[str, Any]], text: str) -> None:
        atomic.write_text(self.path / "verdict.json", json.dumps(verdicts, indent=2) + "\n")
        atomic.write_text(self.path / "verdict.txt", text)

    def write_prediction(self, frame: pd.DataFrame, data: dict[str, Any]) -> None:
        write_csv(self.path / "prediction.csv", frame)
        write_json(self.path / "prediction.json", data)

    def write_tune(
        self,
        trials: pd.DataFrame,
        result: dict[str, Any] | None = None,
        winner_toml: str = "",
        code: str = "",
        code_name: str = "tfdata.py.txt",
    ) -> None:
        """``code``: the winner as its input library's own calls, in ``code_name``."""
        write_csv(self.path / "trials.csv", trials)
        if result is not None:
            write_json(self.path / "tune.json", result)
            atomic.write_text(self.path / "winner.toml", winner_toml)
            atomic.write_text(self.path / code_name, code)


@dataclass
class Run:
    """A run directory as read once: what the renderers (report.html, trace.json, TensorBoard)
    take. Frames are None where the run has no such file; ``steps`` holds every step record,
    the twin's alternating ones included (``paired``)."""

    path: Path
    manifest: dict[str, Any]
    status: dict[str, Any]
    summary: pd.DataFrame | None
    steps: pd.DataFrame
    telemetry: dict[str, pd.DataFrame | None]
    variant_runs: list[dict[str, Any]] = field(default_factory=list)
    stages: pd.DataFrame | None = None
    script_stages: pd.DataFrame | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    prediction: pd.DataFrame | None = None
    prediction_info: dict[str, Any] = field(default_factory=dict)
    trials: pd.DataFrame | None = None
    tune_info: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # ``report --against RUN``: that run's directory and summary, the "before" of a diff
    against: tuple[Path, pd.DataFrame] | None = None

    @property
    def partial(self) -> bool:
        """Still running, or ended before it finished: what it shows is what was measured so far."""
        return self.status.get("state") in (RUNNING, STOPPED, FAILED, INTERRUPTED)

    def hellos(self, np: int | None = None) -> list[dict[str, Any]]:
        """The ranks' hellos (rank, local rank, host) of the launch at ``np`` (every launch's
        when None, or when the run predates hellos naming their np)."""
        return [
            e
            for e in self.events
            if e.get("kind") == "hello"
            and isinstance(e.get("rank"), int)
            and (np is None or e.get("np") in (None, 0, np))
        ]
