"""Run a launch command to its end under supervision, whatever the launcher.

``run`` starts the command in its own process group, streams its output line by line (to a
log and a callback), collects the ranks' one-line errors, and ends the command and
everything it started on a timeout, a stop signal or pipeprof's own death, without hanging.
Every launcher (``launch.launcher``) runs its command through it, and so do ``pipeprof
watch`` and the script ablation.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeprof.launch import signals, supervise
from pipeprof.launch.job import ERROR_TAG


@dataclass
class LaunchResult:
    returncode: int
    errors: list[str] = field(default_factory=list)  # one line per failing rank
    timed_out: bool = False
    signum: int | None = None  # the stop signal (SIGINT, SIGTERM, SIGHUP) that ended the run
    tail: list[str] = field(default_factory=list)  # the last lines of output
    program: str = "the command"  # what ran, as the failure line names it
    exits: list[tuple[int, int]] = field(default_factory=list)  # (rank, code), as reported
    hosts: Mapping[int, str] = field(default_factory=dict)  # rank -> its host, as placed
    # (rank, seconds) for ranks whose records stopped that long before the others' (the
    # record stream's; filled in by the workflow once the launch ended)
    silent: list[tuple[int, float]] = field(default_factory=list)
    timeout_s: float = 0.0

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.interrupted

    @property
    def refused(self) -> bool:
        """The ranks ended with exit 2 after pipeprof's one line, or were stopped by the
        launcher after one did (SIGTERM): the script refused as it is used (a usage error, as
        the command's own are), not a failure while it trained."""
        codes = {code for _, code in self.exits} or {self.returncode}  # one process: its own
        return (
            bool(self.errors)
            and 2 in codes
            and codes <= {0, 2, 143, -15, -9, 137, 255}  # the others stopped after it
            and not self.timed_out
            and not self.interrupted
        )

    def reason(self) -> str:
        """One line: why the launch did not end well, naming the rank that caused it and its
        host, before what the other ranks said after it. In that order: a rank whose records
        stopped long before the others' (its host or link lost); a rank that ended without an
        error line (pipeprof's ranks print one for any failure they live to see: one that
        printed none was killed); a rank's own error; then an error that only reports another
        rank's failure (Horovod shut down, a peer's connection closed)."""
        if self.signum is not None:
            return f"interrupted by {signals.signal_name(self.signum)}"
        ended_by = self._ended_by(skip={r for r, _ in self.silent})
        if self.silent:  # a host or link lost: the ranks that waited on it fail after it
            rank, seconds = self.silent[0]
            others = len(self.silent) - 1
            return (
                f"{self._who(rank)} went silent {seconds:.0f} s before the launch ended (its "
                f"process, its host or its link lost?)"
                + (f" with {others} more" if others else "")
                + f"; then {ended_by}"
            )
        return ended_by

    def _ended_by(self, skip: set[int]) -> str:
        """The line without the silent ranks (``skip``): named first already.

        A rank ended by SIGTERM was stopped by its launcher (after another's failure, or its
        own), not the first to fail; so was one killed by SIGKILL after a rank that said its own
        error had exited: a launcher sends SIGKILL to a rank that outlives its SIGTERM, and a
        rank under MultiWorkerMirroredStrategy does (TensorFlow's preemption handler catches
        SIGTERM and only records it). A remote rank so killed ends its ssh with 255."""
        if self.timed_out:
            return f"timed out after {self.timeout_s:g} s" if self.timeout_s else "timed out"
        said = {rank_of(e) for e in self.errors}
        own = {rank_of(e) for e in self.errors if not _AFTERMATH.search(e)}
        wordless = next(
            (
                (r, c)
                for i, (r, c) in enumerate(self.exits)
                if c not in (0, 143, -15)
                and r not in said | skip
                and not (c in (-9, 137, 255) and any(q in own for q, _ in self.exits[:i]))
            ),
            None,
        )
        if wordless is not None:
            line = f"{self._who(wordless[0])} {ended(wordless[1])}"
            return (
                line
                + (f"; then {self.errors[0][:200]}" if self.errors else "")
                + _more(len(self.errors) - 1)
            )
        if self.errors:  # a rank's own failure before those that only saw it
            errors = same_said_once(sorted(self.errors, key=lambda e: bool(_AFTERMATH.search(e))))
            return (
                errors[0]
                + (f"; then {errors[1][:200]}" if len(errors) > 1 else "")
                + _more(len(errors) - 2)
            )
        last = next((line for line in reversed(self.tail) if line.strip()), "no output")
        return f"{self.program} exited with {self.returncode}: {last.strip()[:300]}"

    def _who(self, rank: int) -> str:
        host = self.hosts.get(rank, "")
        return f"rank {rank} on {host}" if host and host != "localhost" else f"rank {rank}"


_RANK = re.compile(r"rank (\d+)\b")
_SAID = re.compile(r"rank (\d+)(?: on (\S+))?: (.*)", re.S)
# what a rank says when another rank's failure ended the collective it was in
# (MultiWorkerMirroredStrategy's workers: "Collective ops is aborted by: ..." after a peer's loss)
_AFTERMATH = re.compile(
    r"Horovod has been shut down|Connection closed by peer|Connection reset by peer|"
    r"Broken pipe|HorovodInternalError|Collective ops is aborted by"
)


def same_said_once(errors: list[str]) -> list[str]:
    """The ranks' lines, those that say the same thing merged into one that names each rank
    ("ranks 0 and 1 on h: ..."), in the order of their first."""
    groups: dict[str, list[tuple[str, str, str]]] = {}  # said -> (line, rank, host)
    for line in errors:
        m = _SAID.fullmatch(line)
        said, rank, host = (m.group(3), m.group(1), m.group(2) or "") if m else (line, "", "")
        groups.setdefault(said, []).append((line, rank, host))
    out: list[str] = []
    for said, who in groups.items():
        if len(who) == 1 or not all(rank for _, rank, _ in who):
            out.extend(line for line, _, _ in who)
            continue
        who.sort(key=lambda w: int(w[1]))
        hosts = {host for _, _, host in who}
        if len(hosts) == 1:
            ranks = [rank for _, rank, _ in who]
            host = hosts.pop()
            names = ", ".join(ranks[:-1]) + f" and {ranks[-1]}" + (f" on {host}" if host else "")
            out.append(f"ranks {names}: {said}")
        else:
            each = [f"rank {rank}" + (f" on {host}" if host else "") for _, rank, host in who]
            out.append(", ".join(each[:-1]) + f" and {each[-1]}: {said}")
    return out


def rank_of(error: str) -> int | None:
    """The rank a rank's error line names ("rank 3 on node-b: ..."), or None."""
    m = _RANK.match(error)
    return int(m.group(1)) if m else None


def ended(code: int) -> str:
    """How a rank that printed no error line ended, from its exit code (a shell's 128 + N, or
    a negative signal number, for a signal; ssh's 255 for a lost connection)."""
    signum = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    if signum:
        return f"was killed by {signals.signal_name(signum)} (exit {code}) and printed no error"
    if code == 255:  # a remote rank killed by a signal ends its ssh this way too
        return "ended without an error line; ssh exited 255 (the rank killed, or its host or link lost)"
    return f"exited with {code} and printed no error"


def _more(n: int) -> str:
    return f" (and {n} more)" if n > 0 else ""


def _next_or_none(lines: queue.Queue[str | None]) -> str | None:
    try:
        return lines.get_nowait()
    except queue.Empty:
        return None


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    timeout_s: float,
    on_line: Callable[[str], None] | None = None,
    grace_s: float = supervise.GRACE_S,
    program: str | None = None,
    rank_exit: Callable[[str], tuple[int, int] | None] | None = None,
    hosts: Mapping[int, str] | None = None,
) -> LaunchResult:
    """Run ``argv`` to the end, teeing its output to ``log_path`` and each line to ``on_line``.

    The command and everything it starts are stopped (SIGTERM, ``grace_s``, SIGKILL) at the
    timeout, which holds however much it prints, and on SIGINT, SIGTERM or SIGHUP, which
    ``result.signum`` then names; it gets SIGTERM should pipeprof die without a chance to.
    ``rank_exit`` reads the launcher's line for a rank's exit ((rank, code), or None), and
    ``hosts`` says where each rank ran: the failure line then names the rank that failed first
    and its host."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: queue.Queue[str | None] = queue.Queue()
    result = LaunchResult(
        returncode=-1,
        program=program or Path(argv[0]).name,
        hosts=dict(hosts or {}),
        timeout_s=timeout_s,
    )
    with signals.handled(), log_path.open("w") as log:
        log.write("$ " + " ".join(a if len(a) < 200 else a[:40] + "…" for a in argv) + "\n")
        log.flush()
        proc = subprocess.Popen(
            supervise.dies_with_parent_argv(argv, env.get("PATH")),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
            errors="replace",
        )
        family = supervise.Family(proc)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        def take(line: str) -> None:
            log.write(line)
            result.tail = (result.tail + [line.rstrip("\n")])[-40:]
            if ERROR_TAG in line:
                result.errors.append(line.split(ERROR_TAG, 1)[1].strip())
            elif rank_exit is not None and (exit_ := rank_exit(line.rstrip())) is not None:
                result.exits.append(exit_)
            if on_line is not None:
                on_line(line.rstrip("\n"))

        reader = threading.Thread(target=pump, name="pipeprof-launch-output", daemon=True)
        with signals.on_force(family.kill_now):
            try:
                reader.start()
                deadline = time.monotonic() + timeout_s
                while True:
                    left_s = deadline - time.monotonic()
                    if left_s <= 0:  # checked on every line: a chatty hung run times out too
                        result.timed_out = True
                        break
                    family.refresh()
                    try:
                        line = lines.get(timeout=min(0.25, left_s))
                    except queue.Empty:
                        continue
                    if line is None:
                        break
                    take(line)
            except KeyboardInterrupt as exc:  # signals.Interrupted, or Ctrl-C outside handled()
                result.signum = signals.signum_of(exc)
            finally:
                try:
                    result.returncode = family.stop(grace_s)
                except KeyboardInterrupt as exc:  # the first signal landed while stopping: go on
                    result.signum = signals.signum_of(exc)
                    result.returncode = family.stop(grace_s)
                reader.join(timeout=5)
                while (rest := _next_or_none(lines)) is not None:  # what it said while stopping
                    take(rest)
                log.flush()
    return result
