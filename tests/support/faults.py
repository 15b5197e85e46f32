"""Faults to inject into a running service: a network that can be cut, writers that survive the faults.

``TcpProxy`` stands between the service and its database: ``cut()`` drops
every connection through it and refuses new ones (each accepted connection is
closed at once) until ``restore()`` -- the network to the database gone, as
the service sees it.  ``Writer`` commits random transactions in a thread
the whole time, reconnecting whenever the database goes away (a transaction
cut off by a fault is simply lost or committed: the oracle compares the
result tables with the database as it ends up).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Callable, Iterator


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; ``cut()`` / ``restore()`` the network."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self.connections = 0  # connections forwarded so far
        threading.Thread(target=self._accept, daemon=True, name="test-proxy").start()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            doomed, self._open = self._open, set()
        for sock in doomed:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._cut:
                    _close(client)
                    _close(upstream)
                    continue
                self._open |= {client, upstream}
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open -= {source, sink}
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class Writer:
    """Commits ``transaction(conn)`` over and over in a thread, on connections from ``connect()``,
    reconnecting after any error; ``committed`` counts the transactions that got through."""

    def __init__(self, connect: Callable[[], Any], transaction: Callable[[Any], None], pause_s: float = 0.005):
        self.connect, self.transaction, self.pause_s = connect, transaction, pause_s
        self.committed = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="test-writer")

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = self.connect()
                self.transaction(conn)
                self.committed += 1
            except Exception:  # the database restarting, the connection killed ...
                self.errors += 1
                with contextlib.suppress(Exception):
                    conn.close()
                conn = None
                time.sleep(0.1)
            time.sleep(self.pause_s)
        with contextlib.suppress(Exception):
            if conn is not None:
                conn.close()

    @contextlib.contextmanager
    def running(self) -> Iterator["Writer"]:
        """Write while the block runs (then wait for the last transaction to end)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True, name="test-writer")
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(60)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll until ``predicate()`` is truthy (its value is returned); fail saying ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
