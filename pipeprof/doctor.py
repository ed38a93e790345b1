"""`pipeprof doctor` as a library call: what works here, and what a scenario needs that is missing.

Before a cluster run: Python, TensorFlow and Horovod (versions, and how Horovod was built,
asked of ``horovod.tensorflow`` in the probe that imports it), GPUs as NVML and TensorFlow
see them, CPU cores and affinity, the launch the scenario asks for, and its data (files, classes, bytes, and the
files ``data.check`` finds bad). Nothing is generated, written or launched. TensorFlow and
Horovod are probed in subprocesses, so a broken install is a finding, not a crash.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipeprof import __version__, plugins
from pipeprof.errors import PipeprofError
from pipeprof.launch.horovod import BUILD_PROBE
from pipeprof.scenario import LaunchConfig, Scenario

Status = Literal["ok", "note", "warn", "fail"]
PROBE_TIMEOUT_S = 180.0
SCAN_THREADS = 8


@dataclass(frozen=True)
class Finding:
    area: str  # python, tensorflow, horovod, gpu, cpu, launch, data
    what: str
    status: Status
    detail: str


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    bad_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason), data's

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    def add(self, area: str, what: str, status: Status, detail: str) -> None:
        self.findings.append(Finding(area, what, status, detail))


# --- probes (subprocesses)

_TF_PROBE = r"""
import json, os
out = {}
try:
    import tensorflow as tf
    out["tensorflow"] = tf.__version__
    out["cuda_built"] = bool(tf.test.is_built_with_cuda())
    out["tf_gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
except Exception as exc:
    out["tensorflow_error"] = f"{type(exc).__name__}: {exc}"
try:
    import keras
    out["keras"] = keras.__version__
    out["keras_backend"] = keras.backend.backend()
except Exception as exc:
    out["keras_error"] = f"{type(exc).__name__}: {exc}"
try:
    import jax
    out["jax"] = jax.__version__
    out["jax_devices"] = [f"{d.platform}:{d.id}" for d in jax.devices()]
except ImportError:
    pass
except Exception as exc:
    out["jax_error"] = f"{type(exc).__name__}: {exc}"
"""
_PROBE = _TF_PROBE + BUILD_PROBE + 'print("PIPEPROF-DOCTOR " + json.dumps(out))\n'


def _quiet_env() -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def probe_frameworks(python: str = sys.executable) -> dict[str, Any]:
    """TensorFlow's and Horovod's versions, TensorFlow's GPUs; ``*_error`` keys say what failed."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            env=_quiet_env(),
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"tensorflow_error": f"importing TensorFlow took over {PROBE_TIMEOUT_S:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("PIPEPROF-DOCTOR "):
            return json.loads(line.split(" ", 1)[1])
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"tensorflow_error": f"the probe exited with {proc.returncode}: {last[:200]}"}


# --- the checks


def diagnose(scenario: Scenario | None, *, scenario_error: str = "", nvml: Any = None) -> Report:
    """Every check; the slow ones (the framework probe, the data scan) run side by side."""
    from pipeprof.launch.horovod import find_horovodrun
    from pipeprof.telemetry.nvml import Nvml

    report = Report()
    try:
        horovodrun = find_horovodrun()
    except PipeprofError as exc:
        horovodrun, missing = "", exc.message
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="pipeprof-doctor") as pool:
        frameworks = pool.submit(probe_frameworks)
        data = pool.submit(data_findings, scenario) if scenario is not None else None
        nvml = nvml or Nvml()
        gpus = nvml.inventory()
        nvml_reason = "" if nvml.available else nvml.reason
        probe = frameworks.result()
        parsed = probe.get("horovod_build", {})
        build_error = (
            missing
            if not horovodrun
            else (
                ""
                if parsed
                else f"cannot be read: {probe.get('horovod_error', probe.get('tensorflow_error', '?'))}"
            )
        )
        found, bad = data.result() if data else ([], [])

    report.add(
        "python",
        "Python",
        "ok",
        f"{platform.python_version()} ({sys.executable}); pipeprof {__version__}",
    )
    engine = _engine(report, scenario)
    _frameworks(report, probe)
    if horovodrun or plugins.capability(plugins.DISTRIBUTION, engine, "horovod_build", False):
        _horovod(report, horovodrun, parsed, build_error, scenario)
    else:
        report.add("horovod", "Horovod", "note", f"not installed; train.engine {engine} needs none")
    _gpus(report, gpus, nvml_reason, probe)
    _cpu(report)
    if scenario_error:
        report.add("scenario", "scenario", "fail", scenario_error)
    if scenario is not None:
        _launch(report, scenario, len(gpus))
        report.findings += found
        report.bad_files = bad
    return report


def _engine(report: Report, scenario: Scenario | None) -> str:
    """The engine the scenario asks for, or the one "auto" takes on this host, said."""
    asked = scenario.train.engine if scenario is not None else plugins.AUTO
    if asked != plugins.AUTO:
        report.add("engine", "engine", "ok", f"{asked} (as the scenario asks)")
        return asked
    engine, why = plugins.choose_engine()
    report.add("engine", "engine", "ok", f"auto: {why}")
    return engine


def _frameworks(report: Report, probe: dict[str, Any]) -> None:
    if "tensorflow" in probe:
        build = "CUDA build" if probe.get("cuda_built") else "CPU-only build"
        report.add("tensorflow", "TensorFlow", "ok", f"{probe['tensorflow']} ({build})")
    else:
        report.add(
            "tensorflow",
            "TensorFlow",
            "fail",
            f"cannot be imported: {probe.get('tensorflow_error', '?')}",
        )
    if "horovod_error" in probe:
        report.add(
            "horovod",
            "Horovod",
            "fail",
            f"cannot be imported with TensorFlow: {probe['horovod_error']}",
        )
    elif "horovod_version" in probe:
        report.add(
            "horovod", "Horovod", "ok", f"{probe['horovod_version']} (horovod.tensorflow imports)"
        )
    if "keras" in probe:
        report.add("keras", "Keras", "ok", f"{probe['keras']} (backend {probe['keras_backend']})")
    elif "keras_error" in probe:
        report.add("keras", "Keras", "note", f"cannot be imported: {probe['keras_error']}")
    if "jax" in probe:
        devices = probe.get("jax_devices", [])
        report.add(
            "jax", "JAX", "ok", f"{probe['jax']}: {len(devices)} device(s) ({', '.join(devices)})"
        )
    elif "jax_error" in probe:
        report.add("jax", "JAX", "fail", f"cannot be imported: {probe['jax_error']}")


def _built(section: dict[str, bool]) -> str:
    return ", ".join(k for k, v in section.items() if v) or "none"


def _horovod(
    report: Report,
    horovodrun: str,
    parsed: dict[str, dict[str, bool]],
    error: str,
    scenario: Scenario | None,
) -> None:
    if not horovodrun:
        report.add("horovod", "horovodrun", "fail", error)
        return
    if error:
        report.add("horovod", "Horovod's build", "fail", error)
        return
    frameworks, controllers = parsed.get("frameworks", {}), parsed.get("controllers", {})
    ops = parsed.get("tensor operations", {})
    report.add("horovod", "horovodrun", "ok", horovodrun)
    report.add(
        "horovod",
        "frameworks",
        "ok" if frameworks.get("TensorFlow") else "fail",
        f"built for {_built(frameworks)}"
        + (
            ""
            if frameworks.get("TensorFlow")
            else "; pipeprof needs TensorFlow (HOROVOD_WITH_TENSORFLOW=1)"
        ),
    )
    wanted = scenario.launch.controller if scenario is not None else ""
    for name, built in controllers.items():
        needed = name.lower() == wanted
        status: Status = "ok" if built else ("fail" if needed else "note")
        detail = "built" if built else "not built"
        if needed:
            detail += f"; the scenario's launch.controller is {wanted}"
        report.add("horovod", f"controller {name}", status, detail)
    report.add("horovod", "tensor operations", "ok", f"built: {_built(ops)}")


def _gpus(
    report: Report, gpus: list[dict[str, Any]], nvml_reason: str, probe: dict[str, Any]
) -> None:
    if nvml_reason:
        report.add("gpu", "NVML", "note", nvml_reason)
    else:
        names = ", ".join(f"{g['index']}: {g['name']}" for g in gpus) or "none"
        report.add("gpu", "NVML", "ok", f"{len(gpus)} GPU(s): {names}")
    if "tensorflow" not in probe:
        return
    tf_gpus = probe.get("tf_gpus", [])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    narrowed = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    if not gpus and not tf_gpus:
        report.add("gpu", "GPUs", "note", "no GPU here: ranks train on the CPU, one slot per core")
    elif len(tf_gpus) == len(gpus) or (visible is not None and 0 < len(tf_gpus) <= len(gpus)):
        report.add("gpu", "TensorFlow", "ok", f"sees {len(tf_gpus)} GPU(s){narrowed}, as NVML does")
    elif not tf_gpus:
        why = (
            "a CPU-only TensorFlow"
            if not probe.get("cuda_built")
            else "CUDA/cuDNN libraries missing or mismatched"
        )
        report.add(
            "gpu",
            "TensorFlow",
            "warn",
            f"sees no GPU while NVML sees {len(gpus)}{narrowed}: {why}; "
            f"ranks would train on the CPU",
        )
    else:
        report.add(
            "gpu",
            "TensorFlow",
            "warn",
            f"sees {len(tf_gpus)} GPU(s) while NVML sees {len(gpus)}{narrowed}",
        )


def _cpu(report: Report) -> None:
    from pipeprof.launch import topology

    total = os.cpu_count() or 1
    usable = topology.usable_cores()
    try:
        cpus = sorted(os.sched_getaffinity(0))
        affinity = f"affinity {_ranges(cpus)}"
    except (AttributeError, OSError):
        affinity = "no affinity on this OS"
    status: Status = "ok" if usable == total else "note"
    report.add(
        "cpu", "CPU cores", status, f"{total} on the host, {usable} usable by pipeprof ({affinity})"
    )


def _ranges(cpus: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(cpus):
        start = c if start is None else start
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(str(c) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def _launch(report: Report, scenario: Scenario, gpu_count: int) -> None:
    from pipeprof.launch.launcher import check_slots

    launch = scenario.launch
    if launch.controller == "mpi":
        mpirun = shutil.which("mpirun")
        report.add(
            "launch",
            "mpirun",
            "ok" if mpirun else "fail",
            mpirun or "not on PATH; launch.controller = mpi needs an MPI (e.g. Open MPI)",
        )
    refused = []
    for n in launch.np:
        try:
            check_slots(n, launch, gpu_count)
        except PipeprofError as exc:
            refused.append(exc.message)
    if refused:
        report.add("launch", "slots", "fail", refused[0])
    else:
        report.add("launch", "slots", "ok", f"worker counts {', '.join(map(str, launch.np))} fit")
    _hosts(report, launch)


def _hosts(report: Report, launch: LaunchConfig) -> None:
    """Each host the launch names: reachable over ssh, and its own hostname."""
    from pipeprof.launch import hosts, topology

    try:
        named = topology.host_slots(launch)
    except PipeprofError as exc:
        report.add("launch", "hosts", "fail", exc.message)
        return
    if named is None:
        return
    answers = hosts.hostnames([h for h, _ in named[0]])
    for host, answer in answers.items():
        if isinstance(answer, PipeprofError):
            report.add("launch", f"host {host}", "fail", answer.message)
        else:
            how = "this host" if topology.is_this_host(host) else "reached over ssh"
            report.add("launch", f"host {host}", "ok", f"{how}; hostname {answer}")
    reached = {h: a for h, a in answers.items() if isinstance(a, str)}
    if (clash := hosts.shared_hostname(reached)) is not None:
        report.add("launch", "hostnames", "fail", clash)


# --- data


def data_findings(scenario: Scenario) -> tuple[list[Finding], list[tuple[str, str]]]:
    """The scenario's data: where, classes, files and bytes, and its bad files (path, reason)."""
    report = Report()
    data = scenario.data
    where = scenario.source_file or "scenario"
    if data.source == "factory":
        report.add(
            "data", "source", "note", f"data.factory {data.factory}: your own dataset, not checked"
        )
        return report.findings, []
    if data.source == "generated":
        from pipeprof.data import generate
        from pipeprof.workflows.data import resolve_data_path

        g = data.generate
        root = generate.dataset_dir(
            g, str(resolve_data_path(scenario, data.path)) if data.path else ""
        )
        if not generate.is_complete(root, g):
            try:
                generate.check_target(root, g, f"{where}: data.path" if data.path else "")
            except PipeprofError as exc:
                report.add("data", "generated", "fail", exc.message)
                return report.findings, []
            report.add(
                "data",
                "generated",
                "note",
                f"not generated yet: {g.images:,} {g.format.upper()} images "
                f"({g.size}px, {g.classes} classes) will be written to {root} "
                f"on the first run",
            )
            return report.findings, []
        return _folder(report, scenario, root)
    if data.source == "folder":
        from pipeprof.workflows.data import resolve_data_path

        return _folder(report, scenario, resolve_data_path(scenario, data.path))
    return _tfrecords(report, scenario)


def _bad_verdict(
    report: Report, scenario: Scenario, bad: list[tuple[str, str]], total: int
) -> None:
    if not bad:
        report.add("data", "bad files", "ok", f"none among {total:,}")
    elif scenario.data.on_bad_file == "fail":
        report.add(
            "data",
            "bad files",
            "fail",
            f'{len(bad):,} of {total:,}, and data.on_bad_file = "fail" '
            f"ends the run on the first (first: {bad[0][0]}: {bad[0][1]})",
        )
    else:
        report.add(
            "data",
            "bad files",
            "warn",
            f"{len(bad):,} of {total:,}: skipped and counted during the run "
            f'(data.on_bad_file = "skip")',
        )


def _folder(
    report: Report, scenario: Scenario, root: Path
) -> tuple[list[Finding], list[tuple[str, str]]]:
    from pipeprof.data.check import check_file
    from pipeprof.data.files import scan_image_folder

    if not root.is_dir():
        report.add("data", "data.path", "fail", f"'{root}' does not exist or is not a directory")
        return report.findings, []
    try:
        listing = scan_image_folder(root)
    except PipeprofError as exc:
        report.add("data", "data.path", "fail", exc.message)
        return report.findings, []
    with ThreadPoolExecutor(
        max_workers=SCAN_THREADS, thread_name_prefix="pipeprof-doctor-scan"
    ) as pool:
        verdicts = list(pool.map(check_file, listing.files))
    bad = list(listing.unreadable) + [
        (f, v.reason) for f, v in zip(listing.files, verdicts) if not v.ok
    ]
    total = len(listing.files) + len(listing.unreadable)
    size = sum(v.size for v in verdicts)
    report.add("data", "data.path", "ok", str(root))
    classes = len(listing.classes)
    matches = classes == scenario.data.num_classes
    report.add(
        "data",
        "classes",
        "ok" if matches else "fail",
        f"{classes}"
        + ("" if matches else f", but data.num_classes is {scenario.data.num_classes}"),
    )
    report.add("data", "files", "ok", f"{total:,} image files, {_bytes(size)}")
    _bad_verdict(report, scenario, bad, total)
    return report.findings, bad


def _tfrecords(report: Report, scenario: Scenario) -> tuple[list[Finding], list[tuple[str, str]]]:
    from pipeprof.data.check import scan_tfrecord
    from pipeprof.workflows.data import resolve_data_path

    path = str(resolve_data_path(scenario, scenario.data.path))
    pattern = os.path.join(path, "*") if os.path.isdir(path) else path
    matched = sorted(glob.glob(os.path.expanduser(pattern)))
    files = [f for f in matched if os.path.isfile(f) or os.path.islink(f)]
    if not files:
        report.add("data", "data.path", "fail", f"no TFRecord files match '{path}'")
        return report.findings, []
    with ThreadPoolExecutor(
        max_workers=SCAN_THREADS, thread_name_prefix="pipeprof-doctor-scan"
    ) as pool:
        scans = list(pool.map(scan_tfrecord, files))
    bad = [(f, problem) for f, (_, problem) in zip(files, scans) if problem]
    size = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    report.add("data", "data.path", "ok", path)
    report.add(
        "data",
        "files",
        "ok",
        f"{len(files):,} TFRecord files, {sum(n for n, _ in scans):,} records "
        f"(framing read), {_bytes(size)}",
    )
    _bad_verdict(report, scenario, bad, len(files))
    report.add(
        "data",
        "records",
        "note",
        "images inside records, and record checksums, are checked while the run " "reads them",
    )
    return report.findings, bad


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"
