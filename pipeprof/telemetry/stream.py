"""The record stream from ranks to the launcher, while training runs.

Ranks connect over TCP to the launcher's collector (the address travels in the job, or in
``PIPEPROF_STREAM`` for ``pipeprof watch``) and send JSON lines: first a hello with a token,
then records ``{"kind": ..., ...}``. This works across hosts as long as the ranks can reach
the launcher's address (``--stream-host`` sets which one they are given). When a rank cannot
connect, or the connection drops, it appends the same lines to
``RUN_DIR/stream/rankN.jsonl`` instead (a shared run directory then still gets everything).

One collector thread serves every connection with a selector; it hands each record to
``on_record`` and never blocks a rank: ranks buffer and send in one write per flush.
"""

from __future__ import annotations

import json
import logging
import selectors
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from pipeprof.telemetry.priority import lower_this_thread

log = logging.getLogger("pipeprof.stream")
ENV_ADDRESS = "PIPEPROF_STREAM"
ENV_TOKEN = "PIPEPROF_STREAM_TOKEN"
ENV_RUN_DIR = "PIPEPROF_RUN_DIR"


class Collector:
    """Launcher side: accepts ranks and passes every record they send to ``on_record``."""

    def __init__(self, on_record: Callable[[dict[str, Any]], None], *, bind: str = "127.0.0.1",
                 advertise: str | None = None, token: str = "") -> None:
        self.on_record = on_record
        self.token = token
        self._server = socket.create_server((bind, 0))
        self._server.setblocking(False)
        port = self._server.getsockname()[1]
        self.address = f"{advertise or bind}:{port}"
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipeprof-collector", daemon=True)
        self.connections = 0
        self.rejected = 0

    def __enter__(self) -> "Collector":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for key in list(self._sel.get_map().values()):
            self._sel.unregister(key.fileobj)
            key.fileobj.close()
        self._sel.close()

    def _loop(self) -> None:
        lower_this_thread()
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.1):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key)
        # drain what arrived before stop
        for key, _ in self._sel.select(timeout=0):
            if key.data is not None:
                self._read(key)

    def _accept(self) -> None:
        try:
            conn, _ = self._server.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        self._sel.register(conn, selectors.EVENT_READ, {"buf": b"", "hello": False})
        self.connections += 1

    def _read(self, key: selectors.SelectorKey) -> None:
        conn, state = key.fileobj, key.data
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
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                log.warning("dropped a malformed stream line (%d bytes)", len(line))
                continue
            if not state["hello"]:
                if record.get("hello") != self.token:
                    self.rejected += 1
                    self._sel.unregister(conn)
                    conn.close()
                    return
                state["hello"] = True
                continue
            self.on_record(record)


class StreamClient:
    """Rank side: buffer records, send them in one write per ``flush``."""

    def __init__(self, address: str | None, *, token: str = "", rank: int = 0,
                 fallback_dir: str | Path | None = None) -> None:
        self.rank = rank
        self._lock = threading.Lock()
        self._buf: list[str] = []
        self._sock: socket.socket | None = None
        self._fallback: Path | None = Path(fallback_dir) / "stream" / f"rank{rank}.jsonl" if fallback_dir else None
        self.mode = "none"
        if address:
            host, _, port = address.rpartition(":")
            try:
                self._sock = socket.create_connection((host, int(port)), timeout=5)
                self._sock.sendall((json.dumps({"hello": token, "rank": rank}) + "\n").encode())
                self.mode = "tcp"
            except (OSError, ValueError) as exc:
                log.warning("rank %d cannot reach the launcher at %s (%s); writing to the run directory", rank,
                            address, exc)
                self._sock = None
        if self._sock is None and self._fallback is not None:
            self.mode = "file"

    def put(self, kind: str, payload: dict[str, Any]) -> None:
        line = json.dumps({"kind": kind, **payload}, separators=(",", ":"))
        with self._lock:
            self._buf.append(line)

    def flush(self) -> None:
        with self._lock:
            lines, self._buf = self._buf, []
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        if self._sock is not None:
            try:
                self._sock.sendall(data)
                return
            except OSError as exc:
                log.warning("rank %d lost the launcher connection (%s); writing to the run directory", self.rank, exc)
                self._sock.close()
                self._sock = None
                self.mode = "file" if self._fallback else "none"
        if self._fallback is not None:
            self._fallback.parent.mkdir(parents=True, exist_ok=True)
            with self._fallback.open("ab") as fh:
                fh.write(data)

    def close(self) -> None:
        self.flush()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # already closed by the peer
            self._sock.close()
            self._sock = None
