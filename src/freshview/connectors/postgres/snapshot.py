"""Reading base tables under a replication slot's exported snapshot, in chunks, as Arrow.

Snapshot plus stream must be exactly the database's history: every session
here imports the slot's snapshot (``SET TRANSACTION SNAPSHOT``) in a
REPEATABLE READ transaction, so it sees the tables as of the slot's
consistent point, no matter what commits meanwhile.  Rows travel as
``COPY ... TO STDOUT`` text and are converted per column by ``types``;
``progress(rows_done)`` is called after every chunk so a caller can show a
progress bar on large tables.

Large tables (``parallel_min_pages`` heap pages or more, PostgreSQL >= 14)
are read in parallel: the heap is cut into contiguous block ranges by
``ctid`` (executed as a TID Range Scan, which reads only those blocks; the
last range is open-ended so a table that grew since its size was read loses
nothing), and ``workers`` threads, each with its own connection importing the
same snapshot, copy ranges and convert them to Arrow.  Chunks reach the
caller through a bounded queue, so memory stays bounded by a few chunks, and
are yielded -- and ``progress`` called -- in the calling thread only.
Chunks arrive in no particular order; a snapshot is a multiset of rows.
A worker's error is re-raised in the caller with its original type; closing
the generator early stops the workers and closes their connections.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import psycopg
import pyarrow as pa
from psycopg import sql

from freshview.connectors.postgres.types import to_arrow
from freshview.schema import TableSchema

CHUNK_ROWS = 100_000
PARALLEL_MIN_PAGES = 1000  # ~8 MB: smaller tables copy quickly enough over one connection
RANGES_PER_WORKER = 4      # more ranges than workers, so one that finishes early takes another range
_POLL_S = 0.1              # how often a worker blocked on a full queue checks for a stop

Range = tuple[int, int | None]  # [first block, end block), end None = to the end of the table


def read_table(dsn: str, snapshot_name: str, table: str, schema: TableSchema,
               chunk_rows: int = CHUNK_ROWS, progress: Callable[[int], None] | None = None, *,
               workers: int = 2, parallel_min_pages: int = PARALLEL_MIN_PAGES) -> Iterator[pa.Table]:
    """Yield the table's rows under the snapshot as inserts (+1) in chunks of at most ``chunk_rows``."""
    schema_name, _, table_name = table.rpartition(".")
    schema_name = schema_name or "public"
    select = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(sql.Identifier(n) for n in schema.names), sql.Identifier(schema_name, table_name))
    pages = _heap_pages(dsn, schema_name, table_name) if workers > 1 else 0
    if workers > 1 and pages >= max(parallel_min_pages, 1):
        chunks = _read_parallel(dsn, snapshot_name, table, select, schema, chunk_rows, workers,
                                _block_ranges(pages, workers * RANGES_PER_WORKER))
    else:
        chunks = _read_ranges(dsn, snapshot_name, select, schema, chunk_rows, [(0, None)])
    done = 0
    with contextlib.closing(chunks):  # closing us closes the reader, which stops its workers
        for chunk in chunks:
            done += chunk.num_rows
            yield chunk
            if progress:
                progress(done)


def _heap_pages(dsn: str, schema_name: str, table_name: str) -> int:
    """The table's current heap size in blocks; 0 (read serially) where ranges would not pay off."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Before PostgreSQL 14 there is no TID Range Scan: every range would scan the whole table.
        if conn.info.server_version < 140000:
            return 0
        # The file size, not pg_class.relpages: relpages stays 0 until the first VACUUM or ANALYZE,
        # so a freshly loaded table would look empty.  A partitioned parent has no heap of its own
        # and gets 0, i.e. one COPY over all partitions.
        row = conn.execute(
            "SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
            (schema_name, table_name)).fetchone()
    return int(row[0]) if row else 0


def _block_ranges(pages: int, parts: int) -> list[Range]:
    """Contiguous, non-overlapping block ranges covering [0, infinity): no row is missed or read twice."""
    step = max(1, -(-pages // max(parts, 1)))
    starts = list(range(0, max(pages, 1), step))
    return [(a, b) for a, b in zip(starts, starts[1:])] + [(starts[-1], None)]


def _range_select(select: sql.Composable, block_range: Range) -> sql.Composable:
    first, end = block_range
    if first == 0 and end is None:
        return select
    # Offsets start at 1, so '(b,0)' sorts before every tuple of block b: the bound is exactly a block edge.
    where = sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({first},0)"))
    if end is not None:
        where = sql.SQL("{} AND ctid < {}::tid").format(where, sql.Literal(f"({end},0)"))
    return sql.SQL("{} WHERE {}").format(select, where)


def _read_ranges(dsn: str, snapshot_name: str, select: sql.Composable, schema: TableSchema,
                 chunk_rows: int, ranges: Iterable[Range],
                 on_range: Callable[[Range], None] | None = None) -> Iterator[pa.Table]:
    """Copy the ranges one after another over one connection under the snapshot, chunk by chunk."""
    with psycopg.connect(dsn) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
        for block_range in ranges:
            if on_range:
                on_range(block_range)
            # Leaving this block by an exception (GeneratorExit included) cancels the COPY server-side.
            query = sql.SQL("COPY ({}) TO STDOUT").format(_range_select(select, block_range))
            with conn.cursor() as cur, cur.copy(query) as copy:
                buffer: list[tuple] = []
                for row in copy.rows():  # text format: values arrive as str, NULL as None
                    buffer.append(row)
                    if len(buffer) >= chunk_rows:
                        yield _to_delta(buffer, schema)
                        buffer = []
                if buffer:
                    yield _to_delta(buffer, schema)
        conn.rollback()


class _Stopped(Exception):
    """Raised inside a worker when the consumer has gone away."""


@dataclass
class _Failed:
    error: BaseException
    where: str


_DONE = object()  # a worker's last message when it ran out of ranges


def _read_parallel(dsn: str, snapshot_name: str, table: str, select: sql.Composable, schema: TableSchema,
                   chunk_rows: int, workers: int, ranges: list[Range]) -> Iterator[pa.Table]:
    """Read the ranges in ``workers`` threads (one snapshot-importing connection each), yield here."""
    todo: queue.SimpleQueue[Range] = queue.SimpleQueue()
    for block_range in ranges:
        todo.put(block_range)
    out: queue.Queue[object] = queue.Queue(maxsize=workers)  # bounded: workers wait while we are behind
    stop = threading.Event()

    def put(item: object) -> None:
        while not stop.is_set():  # never block for good: the consumer may have stopped reading
            try:
                out.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                pass
        raise _Stopped

    def next_range() -> Iterator[Range]:
        while not stop.is_set():
            try:
                yield todo.get_nowait()
            except queue.Empty:
                return

    def work(name: str) -> None:
        current: list[Range] = []
        try:
            # closing(): a _Stopped from put() closes the reader at once, which cancels its COPY
            # and closes its connection, instead of whenever the generator is collected.
            with contextlib.closing(_read_ranges(dsn, snapshot_name, select, schema, chunk_rows,
                                                 next_range(), on_range=current.append)) as chunks:
                for chunk in chunks:
                    put(chunk)
            put(_DONE)
        except _Stopped:
            pass
        except BaseException as exc:  # everything must reach the consumer, or it would wait forever
            blocks = (f"blocks {current[-1][0]}..{'end' if current[-1][1] is None else current[-1][1] - 1}"
                      if current else "before its first range")
            with contextlib.suppress(_Stopped):
                put(_Failed(exc, f"{name} reading {table} ({blocks}) under snapshot {snapshot_name}"))

    threads = [threading.Thread(target=work, args=(f"snapshot reader {i + 1}/{workers}",),
                                name=f"freshview-snapshot-{i + 1}", daemon=True) for i in range(workers)]
    try:
        for thread in threads:
            thread.start()
        running = len(threads)
        while running:
            item = out.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, _Failed):
                # Same exception type as a serial read would raise (callers catch psycopg.Error),
                # plus a note saying which reader and which blocks failed.
                item.error.add_note(f"freshview: in {item.where}")
                raise item.error
            else:
                assert isinstance(item, pa.Table)
                yield item
    finally:
        # On error or early close too: each worker notices at its next chunk at the latest, cancels
        # its COPY and closes its connection; waiting here means none outlives the generator.
        stop.set()
        for thread in threads:
            if thread.ident is not None:
                thread.join()


def _to_delta(rows: list[tuple], schema: TableSchema) -> pa.Table:
    columns = list(zip(*rows))
    arrays = [to_arrow(list(col), c.type) for col, c in zip(columns, schema.columns)]
    arrays.append(pa.array([1] * len(rows), pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema.arrow(with_weight=True))
