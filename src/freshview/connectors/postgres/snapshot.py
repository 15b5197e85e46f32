"""Reading base tables under a replication slot's exported snapshot, in chunks, as Arrow.

Snapshot plus stream must be exactly the database's history: every session
here imports the slot's snapshot (``SET TRANSACTION SNAPSHOT``) in a
REPEATABLE READ transaction, so it sees the tables as of the slot's
consistent point, no matter what commits meanwhile.  ``progress(rows_done)``
is called after every chunk so a caller can show a progress bar on large
tables.

Only the columns asked for are selected (``columns=``, ``TableSchema.projected``).
Rows travel as binary COPY straight into Arrow where ADBC's PostgreSQL driver
is installed (``binary_copy``: the default, same values as below), else as
``COPY (SELECT ...) TO STDOUT WITH (FORMAT csv)``, and never become Python
values: the COPY's rows (one per CopyData message, so counting
messages counts rows) are joined into one CSV text per chunk, Arrow's CSV
reader splits that into string columns (PostgreSQL's CSV writes NULL as an
unquoted empty field and the empty string as ``""``, doubles quotes and
quotes fields holding commas, quotes or line breaks), and ``types.to_arrow``
converts each column at once -- the same conversion, with the same per-value
fallback and errors, as for the change stream's text values.  The session
prints in the one spelling those parsers expect: UTF-8, ISO dates and
timestamptz in UTC (the same instants, offsets ``+00``).  A chunk ends at
``chunk_rows`` rows or once its text passes ``CHUNK_BYTES``.

Large tables (``parallel_min_pages`` heap pages or more, PostgreSQL >= 14)
are read in parallel: the heap is cut into contiguous block ranges by
``ctid`` (executed as a TID Range Scan, which reads only those blocks; the
last range is open-ended so a table that grew since its size was read loses
nothing), and ``workers`` threads, each with its own connection importing the
same snapshot, copy ranges and convert them to Arrow (the CSV parsing and the
casts run without the GIL; psycopg's per-row ``read`` is what holds it).
Chunks reach the caller through a bounded queue, so memory stays bounded by a
few chunks, and are yielded -- and ``progress`` called -- in the calling
thread only.
Chunks arrive in no particular order; a snapshot is a multiset of rows.
A worker's error is re-raised in the caller with its original type; closing
the generator early stops the workers and closes their connections.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.csv as pa_csv
from psycopg import sql

from freshview.connectors.postgres import binary_copy
from freshview.connectors.postgres.identifiers import parse
from freshview.connectors.postgres.types import to_arrow
from freshview.errors import FreshviewError
from freshview.schema import TableSchema

CHUNK_ROWS = 100_000
CHUNK_BYTES = 64 << 20     # a chunk also ends once its CSV text passes this (wide rows)
_TAKE_ROWS = 4096          # at most this many rows taken from the COPY between checks of a chunk's size
_FIRST_TAKE = 64           # rows taken first, to learn the rows' width
PARALLEL_MIN_PAGES = 1000  # ~8 MB: smaller tables copy quickly enough over one connection
RANGES_PER_WORKER = 4      # more ranges than workers, so one that finishes early takes another range
_POLL_S = 0.1              # how often a worker blocked on a full queue checks for a stop

Range = tuple[int, int | None]  # [first block, end block), end None = to the end of the table


def read_table(dsn: str, snapshot_name: str, table: str, schema: TableSchema,
               chunk_rows: int = CHUNK_ROWS, progress: Callable[[int], None] | None = None, *,
               workers: int = 2, parallel_min_pages: int = PARALLEL_MIN_PAGES, only: bool = True,
               columns: Sequence[str] | None = None, binary: bool | None = None) -> Iterator[pa.Table]:
    """Yield the table's rows under the snapshot as inserts (+1) in chunks of at most ``chunk_rows``: its own
    rows (``only``: not its inheritance children's, which are tables of their own; a partitioned table is
    read with its partitions, ``only=False``).  ``columns``: only these of ``schema``'s (in ``schema``'s
    order; the key kept only if all its columns are), selected by the query itself.  ``binary``: binary
    COPY through ADBC (``binary_copy``; the default where the driver is installed) or CSV text."""
    name = parse(table)
    schema_name, table_name = name.schema, name.table
    out = schema.projected(columns)
    binary = binary_copy.AVAILABLE if binary is None else binary
    items = (binary_copy.select_list(out.columns) if binary
             else sql.SQL(", ").join(sql.Identifier(n) for n in out.names))
    if not out.columns and not binary:
        items = sql.SQL("NULL")  # CSV: one empty field per row (a row of one NULL), no column kept
    select = sql.SQL("SELECT {} FROM {}{}").format(items, sql.SQL("ONLY " if only else ""),
                                                  sql.Identifier(schema_name, table_name))
    read = partial(_read_binary if binary else _read_ranges, dsn, snapshot_name, select, out, chunk_rows)
    pages = _heap_pages(dsn, schema_name, table_name) if workers > 1 else 0
    if workers > 1 and pages >= max(parallel_min_pages, 1):
        chunks = _read_parallel(read, snapshot_name, table, workers,
                                _block_ranges(pages, workers * RANGES_PER_WORKER))
    else:
        chunks = read([(0, None)])
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
        # Spellings only, no value changes: what Arrow's CSV reader and casts read (see the module doc).
        conn.execute("SET LOCAL client_encoding = 'UTF8'; SET LOCAL DateStyle = 'ISO'; SET LOCAL TimeZone = 'UTC'")
        # Every row or an error: a role subject to a row-level security policy would read a subset that the
        # change stream (which sees every row) then contradicts; off, PostgreSQL refuses such a read.
        conn.execute("SET LOCAL row_security = off")
        for block_range in ranges:
            if on_range:
                on_range(block_range)
            # Leaving this block by an exception (GeneratorExit included) cancels the COPY server-side.
            query = sql.SQL("COPY ({}) TO STDOUT WITH (FORMAT csv)").format(_range_select(select, block_range))
            with conn.cursor() as cur, cur.copy(query) as copy:
                # read() returns one row, b"" at the end; iter() over it skips the generator of iter(copy).
                for rows, text in _csv_chunks(iter(copy.read, b""), chunk_rows):
                    yield _to_delta(text, rows, schema)
        conn.rollback()


def _read_binary(dsn: str, snapshot_name: str, select: sql.Composable, schema: TableSchema,
                 chunk_rows: int, ranges: Iterable[Range],
                 on_range: Callable[[Range], None] | None = None) -> Iterator[pa.Table]:
    """``_read_ranges`` over binary COPY (``binary_copy``): record batches cut to ``chunk_rows``."""
    session = binary_copy.Session(dsn, snapshot_name)
    try:
        for block_range in ranges:
            if on_range:
                on_range(block_range)
            for batch in session.batches(_range_select(select, block_range)):
                for start in range(0, batch.num_rows, max(chunk_rows, 1)):
                    yield binary_copy.to_delta(batch.slice(start, max(chunk_rows, 1)), schema)
    finally:
        session.close()  # also ends a COPY left unfinished (an error, or the reader closed early)


def _csv_chunks(messages: Iterator[memoryview], chunk_rows: int) -> Iterator[tuple[int, bytes]]:
    """Group the COPY's messages, one CSV row each, into (rows, text) of at most ``chunk_rows`` rows.

    Rows are taken in runs (``islice`` loops in C; psycopg's ``read`` per row is the one Python
    call left per row), each sized so that at the chunk's average row width it would just fill
    ``CHUNK_BYTES``: wide rows end a chunk early instead of overshooting by a whole run.  Each
    row's memoryview is copied to bytes at once and dropped: memoryviews are tracked by the
    garbage collector, and thousands of them alive while psycopg allocates per row would be
    promoted and traversed by full collections again and again (reads 2-3x slower); bytes are
    not tracked.
    """
    chunk_rows = max(chunk_rows, 1)
    while True:
        runs: list[bytes] = []
        rows = size = 0
        while rows < chunk_rows and size < CHUNK_BYTES:
            fits = (CHUNK_BYTES - size) * rows // size if size else _FIRST_TAKE
            want = max(1, min(_TAKE_ROWS, chunk_rows - rows, fits))
            taken = list(map(bytes, itertools.islice(messages, want)))
            runs.append(b"".join(taken))
            rows += len(taken)
            size += len(runs[-1])
            if len(taken) < want:  # the COPY is over
                if rows:
                    yield rows, b"".join(runs)
                return
        yield rows, b"".join(runs)


class _Stopped(FreshviewError):
    """Raised inside a worker when the consumer has gone away."""


@dataclass
class _Failed:
    error: BaseException
    where: str


_DONE = object()  # a worker's last message when it ran out of ranges


def _read_parallel(read: Callable[..., Iterator[pa.Table]], snapshot_name: str, table: str, workers: int,
                   ranges: list[Range]) -> Iterator[pa.Table]:
    """Read the ranges in ``workers`` threads (``read(ranges, on_range=)``: one snapshot-importing
    connection each), yield here."""
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
            with contextlib.closing(read(next_range(), on_range=current.append)) as chunks:
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


def _to_delta(text: bytes, rows: int, schema: TableSchema) -> pa.Table:
    """PostgreSQL CSV rows to a delta: Arrow splits the fields, ``to_arrow`` converts each column."""
    names = [f"c{i}" for i in range(len(schema.columns))]
    if names:
        strings = pa_csv.read_csv(
            pa.py_buffer(text),
            read_options=pa_csv.ReadOptions(column_names=names, use_threads=False,
                                            block_size=min(len(text) + 1, 2**31 - 1)),  # one block: one chunk
            # PostgreSQL's CSV defaults; a row of one NULL column is an empty line: keep it.
            parse_options=pa_csv.ParseOptions(delimiter=",", quote_char='"', double_quote=True, escape_char=False,
                                              newlines_in_values=True, ignore_empty_lines=False),
            convert_options=pa_csv.ConvertOptions(column_types={n: pa.string() for n in names}, null_values=[""],
                                                  strings_can_be_null=True, quoted_strings_can_be_null=False))
        if strings.num_rows != rows:
            raise RuntimeError(f"freshview: read {strings.num_rows} CSV rows from {rows} COPY rows")
        arrays = [to_arrow(strings.column(i), c.type) for i, c in enumerate(schema.columns)]
    else:
        arrays = []
    arrays.append(pa.array(np.ones(rows, np.int64)))
    return pa.Table.from_arrays(arrays, schema=schema.arrow(with_weight=True))
