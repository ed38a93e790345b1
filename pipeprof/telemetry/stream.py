"""The record stream from ranks to the launcher, while training runs.

Ranks connect over TCP to the launcher's collector (the address travels in the job, or in
``PIPEPROF_STREAM`` for ``pipeprof watch``) and send JSON lines: first a hello with a token,
then records ``{"kind": ..., ...}``. This works across hosts as long as the ranks can reach
the launcher's address (``--stream-host`` sets which one they are given). When a rank cannot
connect, or the connection drops, it appends the same lines to
``RUN_DIR/stream/rankN.jsonl`` instead (a shared run directory then still gets everything).

One collector thread serves every connection with a selector; it hands each record to
``on_record`` and never blocks a rank: ranks buffer and send in one write per flush. A
malformed record (not JSON, not an object, no ``kind``, a step without its numbers) is
counted and handed to ``on_malformed``, never to ``on_record``, and the stream goes on.
"""

from __future__ import annotations

import json
import logging
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from pipeprof.progress import RankWarning, emit
from pipeprof.telemetry.priority import lower_this_thread

log = logging.getLogger("pipeprof.stream")
ENV_ADDRESS = "PIPEPROF_STREAM"
ENV_TOKEN = "PIPEPROF_STREAM_TOKEN"
ENV_RUN_DIR = "PIPEPROF_RUN_DIR"
MAX_LINE_BYTES = 1 << 20  # a record is a few hundred bytes; a longer line is not one
ACCEPT_BACKLOG = 4096
SEND_TIMEOUT_S = 30.0  # a rank gives up on a launcher that reads nothing for this long
DRAIN_S = 5.0  # at stop, how long the collector goes on reading what ranks sent before it

# What consumers index without a default: the recorder's CSVs, the dashboard's rates.
_RANKED_KINDS = ("step", "proc", "hello", "bye")
_STEP_NUMBERS = ("np", "rank", "step", "input_wait_ms", "step_time_ms", "batch_size", "end_unix_s")
_LOCAL_RANKS = re.compile(r"(\d+(;\d+)*)?")


_NUMBERS = (int, float)  # by exact type: a bool is an int to isinstance, and not a number here


def record_problem(record: Any) -> str | None:
    """Why a decoded stream line cannot be a record, or None when it can."""
    if not isinstance(record, dict):
        return f"not a JSON object but a {type(record).__name__}"
    kind = record.get("kind")
    if not isinstance(kind, str) or not kind:
        return "an object without a 'kind'"
    if kind in _RANKED_KINDS and not (
        isinstance(record.get("rank"), int) and not isinstance(record["rank"], bool)
    ):
        return f"a '{kind}' record without an integer 'rank'"
    if kind == "step" and (
        bad := [f for f in _STEP_NUMBERS if type(record.get(f)) not in _NUMBERS]
    ):
        return f"a 'step' record without numbers in {', '.join(bad)}"
    if kind == "gpu" and not _LOCAL_RANKS.fullmatch(str(record.get("local_ranks", ""))):
        return "a 'gpu' record whose local_ranks are not ';'-separated integers"
    return None


class Collector:
    """Launcher side: accepts ranks and passes every record they send to ``on_record``;
    ``on_malformed(reason, line)`` gets what cannot be a record (``malformed`` counts them)."""

    def __init__(
        self,
        on_record: Callable[[dict[str, Any]], None],
        *,
        bind: str = "127.0.0.1",
        advertise: str | None = None,
        token: str = "",
        on_malformed: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.on_record = on_record
        self.on_malformed = on_malformed
        self.token = token
        # a thousand ranks connect within a second of each other: a queue long enough for all
        # (the kernel caps it at net.core.somaxconn); the default of 128 made the rest retry
        self._server = socket.create_server((bind, 0), backlog=ACCEPT_BACKLOG)
        self._server.setblocking(False)
        port = self._server.getsockname()[1]
        self.address = f"{advertise or bind}:{port}"
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipeprof-collector", daemon=True)
        self.connections = 0
        self.rejected = 0
        self.malformed = 0

    def __enter__(self) -> Collector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=DRAIN_S + 5)
        for key in list(self._sel.get_map().values()):
            self._sel.unregister(key.fileobj)
            cast(socket.socket, key.fileobj).close()  # the server and its connections
        self._sel.close()

    def _loop(self) -> None:
        lower_this_thread()
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.1):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key)
        # drain what arrived before stop: every connection until it has nothing more (a rank
        # that ended has closed it), within DRAIN_S; one read each left records unread
        deadline = time.monotonic() + DRAIN_S
        while True:
            ready = [k for k, _ in self._sel.select(timeout=0.05) if k.data is not None]
            if not ready:
                break
            if time.monotonic() > deadline:
                log.warning(
                    "stopped reading %d rank connection(s) still sending after %.0f s",
                    len(ready),
                    DRAIN_S,
                )
                break
            for key in ready:
                self._read(key)

    def _accept(self) -> None:
        while True:  # every connection waiting, not one per wake-up
            try:
                conn, _ = self._server.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            self._sel.register(conn, selectors.EVENT_READ, {"buf": b"", "hello": False})
            self.connections += 1

    def _read(self, key: selectors.SelectorKey) -> None:
        conn, state = cast(socket.socket, key.fileobj), key.data  # a connection (see _accept)
        try:
            chunk = conn.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._sel.unregister(conn)
            conn.close()
            return
        state["buf"] += chunk
        *lines, state["buf"] = state["buf"].split(b"\n")
        if len(state["buf"]) > MAX_LINE_BYTES:
            lines.append(state["buf"])  # judged (and dropped) as malformed below
            state["buf"] = b""
        self._handle(conn, state, lines)

    def _handle(self, conn: socket.socket, state: dict[str, Any], lines: list[bytes]) -> None:
        """Check and pass on the complete ``lines`` one connection sent."""
        lines = [line for line in lines if line.strip()]
        if state["hello"] and len(lines) > 1:
            # a flush's records decoded in one call: a third of the per-record decoding cost
            # at a thousand ranks; any line that is not one JSON object of its own sends the
            # whole read through the line-by-line path below, which names what is wrong
            if all(line.lstrip()[:1] == b"{" and line.rstrip()[-1:] == b"}" for line in lines):
                try:
                    records = json.loads(b"[" + b",".join(lines) + b"]")
                except ValueError:
                    records = None
                if records is not None and len(records) == len(lines):
                    for record, line in zip(records, lines):
                        self._pass_on(record, line)
                    return
        for line in lines:
            problem: str | None
            try:
                record = json.loads(line)
            except ValueError as exc:
                record, problem = (
                    None,
                    "undecodable bytes" if isinstance(exc, UnicodeDecodeError) else "not JSON",
                )
            else:
                problem = None
            if not state["hello"]:  # the first line must be the hello with our token
                if not isinstance(record, dict) or record.get("hello") != self.token:
                    self.rejected += 1
                    self._sel.unregister(conn)
                    conn.close()
                    return
                state["hello"] = True
                continue
            if problem is not None:
                self._malformed(problem, line)
                continue
            self._pass_on(record, line)

    def _pass_on(self, record: Any, line: bytes) -> None:
        if (problem := record_problem(record)) is not None:
            self._malformed(problem, line)
            return
        try:
            self.on_record(record)
        except (
            KeyError,
            ValueError,
            TypeError,
            AttributeError,
        ) as exc:  # one odd record must not end the stream
            self._malformed(f"{type(exc).__name__} while handling it: {exc}", line)

    def _malformed(self, reason: str, line: bytes) -> None:
        self.malformed += 1
        if self.malformed == 1:
            log.warning(
                "dropped a malformed stream record (%s); later ones are only counted", reason
            )
        if self.on_malformed is not None:
            self.on_malformed(reason, line)


class StreamClient:
    """Rank side: buffer records, send them in one write per ``flush``."""

    def __init__(
        self,
        address: str | None,
        *,
        token: str = "",
        rank: int = 0,
        fallback_dir: str | Path | None = None,
    ) -> None:
        self.rank = rank
        self._lock = threading.Lock()
        self._buf: list[tuple[str, Any]] = []
        self._sock: socket.socket | None = None
        self._fallback: Path | None = (
            Path(fallback_dir) / "stream" / f"rank{rank}.jsonl" if fallback_dir else None
        )
        self.mode = "none"
        if address:
            host, _, port = address.rpartition(":")
            try:
                self._sock = socket.create_connection((host, int(port)), timeout=5)
                self._sock.sendall((json.dumps({"hello": token, "rank": rank}) + "\n").encode())
                # a launcher busy with a thousand ranks may read late: wait for it, within reason
                self._sock.settimeout(SEND_TIMEOUT_S)
                self.mode = "tcp"
            except (OSError, ValueError) as exc:
                self._sock = None
                where = (
                    "writes its records to the run directory (read at the end where that "
                    "folder is shared with the launcher's host)"
                    if self._fallback is not None
                    else "streams nothing"
                )
                # to the user's terminal through the launcher, not only this rank's log
                emit(
                    RankWarning(
                        rank,
                        socket.gethostname(),
                        f"cannot reach the launcher's record stream at {address} ({exc}): it "
                        f"{where}; give an address this host can reach with --stream-host",
                    )
                )
        if self._sock is None and self._fallback is not None:
            self.mode = "file"

    def put(self, kind: str, payload: dict[str, Any] | Any) -> None:
        """Queue a record: a dict, or an object with ``to_dict()`` (a step record). It is turned
        into JSON at ``flush``, on the sampler's thread: the training thread only appends."""
        with self._lock:
            self._buf.append((kind, payload))

    def flush(self) -> None:
        with self._lock:
            queued, self._buf = self._buf, []
        if not queued:
            return
        lines = [
            json.dumps(
                {"kind": kind, **(p if isinstance(p, dict) else p.to_dict())}, separators=(",", ":")
            )
            for kind, p in queued
        ]
        data = ("\n".join(lines) + "\n").encode()
        if self._sock is not None:
            sent, view = 0, memoryview(data)
            try:
                while sent < len(data):  # not sendall: a failure must say how much went
                    sent += self._sock.send(view[sent:])
                return
            except OSError as exc:
                # the lines the launcher has whole stay there; from the one cut on, the file
                data = data[data.rfind(b"\n", 0, sent) + 1 :]
                log.warning(
                    "rank %d lost the launcher connection (%s); writing to the run directory",
                    self.rank,
                    exc,
                )
                self._sock.close()
                self._sock = None
                self.mode = "file" if self._fallback else "none"
        if self._fallback is not None:
            self._fallback.parent.mkdir(parents=True, exist_ok=True)
            with self._fallback.open("ab") as fh:
                fh.write(data)

    def close(self) -> None:
        """Send what is queued and a last record saying this rank ended its stream on purpose
        (the launcher tells it from a rank whose records stopped: killed, or its host lost)."""
        self.put("bye", {"rank": self.rank})
        self.flush()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # already closed by the peer
            self._sock.close()
            self._sock = None
