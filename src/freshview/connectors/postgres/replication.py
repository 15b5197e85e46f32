"""A logical replication connection: slot management and the pgoutput message stream.

psycopg 3 has no replication API yet (psycopg#71), but a connection opened
with ``replication=database`` accepts replication commands, and
``START_REPLICATION`` leaves it in COPY BOTH mode, driven here through
libpq's copy functions.  This module owns only the socket: framing of
XLogData (``w``) and keepalive (``k``) messages, and standby status updates
(``r``) that tell the server which LSN is durably applied.  Decoding is
``protocol``'s job.

Consistency rule (measured in the research notes): the snapshot exported by
``create_slot`` is valid only until this connection runs another command, so
the caller imports it in another session before calling ``start``.
"""

from __future__ import annotations

import select
import struct
import time
from dataclasses import dataclass
from typing import Iterator

import psycopg
from psycopg import pq

from freshview.connectors.postgres import faults
from freshview.connectors.postgres.protocol import format_lsn, parse_lsn
from freshview.errors import ConnectionLost, FreshviewError

_PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01 in Unix microseconds
_XLOGDATA = struct.Struct("!QQq")
_KEEPALIVE = struct.Struct("!QqB")
_STATUS = struct.Struct("!cQQQqB")


@dataclass(frozen=True)
class SlotInfo:
    name: str
    consistent_point: int
    snapshot_name: str | None


@dataclass(frozen=True)
class XLogData:
    data_start: int
    wal_end: int
    payload: bytes


class ReplicationError(FreshviewError):
    """The walsender refused a command (a slot that does not exist, no REPLICATION attribute ...)."""


class ReplicationConnection:
    """One walsender connection: create/drop slots, stream changes, acknowledge progress."""

    def __init__(self, dsn: str, application_name: str = "freshview stream") -> None:
        from freshview.connectors.postgres import named

        try:
            self.conn = psycopg.connect(dsn, replication="database", autocommit=True,
                                        **named(dsn, application_name))
        except psycopg.Error as exc:
            if isinstance(faults.classify(exc), ConnectionLost):  # the server, not the role
                raise ConnectionLost(f"cannot open a replication connection: {exc}".strip()) from exc
            raise ReplicationError(f"cannot open a replication connection: {exc}".strip()) from None
        self._streaming = False
        self._last_status = 0.0
        self.flushed_lsn = 0
        # The server's keepalives say it has sent everything up to here (a logical walsender's sentPtr: the
        # end of the last WAL record it decoded, so every transaction ending there or before came first).
        self.sent_lsn = 0
        self.waited_s = 0.0  # time spent waiting for the server in reads (the rest of a read is work)

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()

    def __enter__(self) -> "ReplicationConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ slots
    def create_slot(self, name: str, export_snapshot: bool = True, temporary: bool = False) -> SlotInfo:
        """CREATE_REPLICATION_SLOT ... LOGICAL pgoutput; returns where the stream starts.

        A temporary slot disappears with this connection: used only for its
        exported snapshot and consistent point when a table starts being followed.
        """
        mode = "EXPORT_SNAPSHOT" if export_snapshot else "NOEXPORT_SNAPSHOT"
        kind = "TEMPORARY LOGICAL" if temporary else "LOGICAL"
        row = self.conn.execute(f'CREATE_REPLICATION_SLOT "{name}" {kind} pgoutput {mode}').fetchone()
        if row is None:
            raise ReplicationError(f"creating slot {name!r} returned nothing")
        return SlotInfo(row[0], parse_lsn(row[1]), row[2])

    def drop_slot(self, name: str) -> None:
        self.conn.execute(f'DROP_REPLICATION_SLOT "{name}"')

    # ------------------------------------------------------------------ streaming
    def start(self, slot: str, publication: str, start_lsn: int = 0, proto_version: int = 2,
              streaming: bool = True) -> None:
        options = [f"proto_version '{proto_version}'", f"publication_names '{publication}'"]
        if streaming and proto_version >= 2:
            options.append("streaming 'on'")
        command = (f'START_REPLICATION SLOT "{slot}" LOGICAL {format_lsn(start_lsn)} '
                   f"({', '.join(options)})")
        pgconn = self.conn.pgconn
        pgconn.send_query(command.encode())
        result = None
        while True:
            pgconn.consume_input()
            if not pgconn.is_busy():
                result = pgconn.get_result()
                break
            select.select([pgconn.socket], [], [], 1.0)
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            message = result.error_message.decode(errors="replace").strip() if result else "no result"
            raise ReplicationError(f"START_REPLICATION failed: {message}")
        self.flushed_lsn = start_lsn
        self._streaming = True

    def messages(self, timeout: float = 1.0) -> Iterator[XLogData]:
        """XLogData messages available within ``timeout`` seconds; keepalives are answered."""
        for frame in self._frames(timeout, 0):
            start, end, _ = _XLOGDATA.unpack_from(frame, 1)
            yield XLogData(start, end, bytes(frame[25:]))

    def payloads(self, timeout: float = 1.0) -> Iterator[memoryview]:
        """Like ``messages`` but only the pgoutput payloads (the service's hot path).

        ``timeout=0`` drains what is readable now (libpq's buffer and the socket)
        without waiting.  A payload is a view of a buffer of its own; stopping
        the iteration between payloads loses nothing.
        """
        return self._frames(timeout, 25)

    def _frames(self, timeout: float, skip: int) -> Iterator[memoryview]:
        """XLogData frames (``w``, start, end, send time, payload) as they come, less their first ``skip`` bytes."""
        pgconn = self.conn.pgconn
        get = pgconn.get_copy_data

        def consume() -> None:
            try:
                pgconn.consume_input()
            except psycopg.OperationalError as exc:  # the server ended the walsender (say wal_sender_timeout)
                raise ReplicationError(f"the server closed the stream: {str(exc).strip()}") from None

        deadline = time.monotonic() + timeout
        while True:
            nbytes, data = get(1)  # non-blocking
            if nbytes == 0:
                consume()  # whatever the socket holds already, without waiting
                nbytes, data = get(1)
            if nbytes == 0:
                self._maybe_send_status()
                now = time.monotonic()
                if now >= deadline:
                    return
                select.select([pgconn.socket], [], [], min(deadline - now, 1.0))
                self.waited_s += time.monotonic() - now
                consume()
                continue
            if nbytes < 0:
                result = pgconn.get_result()
                message = result.error_message.decode(errors="replace").strip() if result else "stream ended"
                raise ReplicationError(f"replication stream ended: {message}")
            kind = data[0]
            if kind == 0x77:  # w: XLogData
                yield data[skip:]
            elif kind == 0x6B:  # k: keepalive
                end, _ts, reply = _KEEPALIVE.unpack_from(data, 1)
                if end > self.sent_lsn:
                    self.sent_lsn = end
                if reply:
                    self.send_status(force=True)

    def acknowledge(self, lsn: int) -> None:
        """Everything up to ``lsn`` is durably applied: the server may recycle that WAL."""
        if lsn > self.flushed_lsn:
            self.flushed_lsn = lsn
        self.send_status(force=True)

    def send_status(self, force: bool = False) -> None:
        if not self._streaming:
            return
        now = time.monotonic()
        if not force and now - self._last_status < 10.0:
            return
        clock = int(time.time() * 1_000_000) - _PG_EPOCH_US
        lsn = self.flushed_lsn
        self.conn.pgconn.put_copy_data(_STATUS.pack(b"r", lsn, lsn, lsn, clock, 0))
        self.conn.pgconn.flush()
        self._last_status = now

    def _maybe_send_status(self) -> None:
        self.send_status(force=False)  # keeps wal_sender_timeout from closing an idle stream
