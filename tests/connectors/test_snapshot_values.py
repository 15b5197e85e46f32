"""The snapshot readers (binary COPY through ADBC, CSV) give exactly what the old per-row reader gave: types,
values, NULLs, refusals.

Every column type a source can have, filled with the values that break naive
parsers (quotes, commas, line breaks, backslashes, NaN, -0.0, 38-digit
numerics, LMT offsets, the ends of the date range ...) and with random rows,
read by ``read_table`` (serially and in parallel block ranges) and by
``tests.support.snapshot_reference.read_table_per_row`` (COPY text, Python
per value).  The database's TimeZone has half-hour and sub-minute (LMT)
offsets, so the old reader really parses offsets while the new one reads UTC.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import random
from decimal import Decimal
from typing import Any, Iterator

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from freshview.connectors.postgres import snapshot, types
from freshview.connectors.postgres.catalog import describe_table
from freshview.connectors.postgres.snapshot import read_table
from freshview.schema import TableSchema
from tests.support.snapshot_reference import read_table_per_row

COLUMNS = {
    "i2": "smallint", "i4": "integer", "i8": "bigint", "f4": "real", "f8": "double precision",
    "n": "numeric", "n12": "numeric(12,2)", "n50": "numeric(50,10)", "n38": "numeric(38,38)",
    "t": "text", "vc": "varchar(40)", "ch": "char(5)", "nm": "name", "b": "boolean",
    "d": "date", "ts": "timestamp", "tstz": "timestamptz",
}
NASTY_TEXT = ["", " ", ",", '"', '""', "a,b", '"quoted", and, commas', "line\nbreak", "cr\rlf\r\n", "\n",
              "back\\slash", "\\.", "\\N", "NULL", "null", "tab\there", "ünïcödé 😀 中文", "  padded  ",
              "'single'", "\\\\", "\x01\x7f", "a" * 1000]
NASTY_ROWS: list[dict[str, Any]] = [
    {},  # every column NULL
    {"i2": "-32768", "i4": "-2147483648", "i8": "-9223372036854775808", "f4": "NaN", "f8": "NaN",
     "n": "0", "n12": "-0.01", "n50": "-1234567890123456789012345678.1234567890",
     "n38": "-0.00000000000000000000000000000000000001", "b": "f", "d": "0001-01-01",
     "ts": "0001-01-01 00:00:00", "tstz": "1900-06-01 12:00:00+00"},
    {"i2": "32767", "i4": "2147483647", "i8": "9223372036854775807", "f4": "Infinity", "f8": "-Infinity",
     "n": "-99999999999999999999999999999999.999999", "n12": "9999999999.99",
     "n50": "1234567890123456789012345678.1234567890", "n38": "0.99999999999999999999999999999999999999",
     "b": "t", "d": "9999-12-31", "ts": "9999-12-31 23:59:59.999999", "tstz": "9999-12-30 23:59:59.999999+00"},
    {"i2": "0", "f4": "-0", "f8": "-0", "n": "12345678901234567890123456789012.123456", "n12": "0",
     "d": "1970-01-01", "ts": "1969-12-31 23:59:59.5", "tstz": "1883-11-18 12:00:00+00"},
    {"f4": "-Infinity", "f8": "Infinity", "n": "-0.000001", "d": "2000-02-29", "ts": "2000-02-29 12:00:00.000001",
     "tstz": "2024-07-01 00:00:00.000001+00"},
    {"f4": "1.4e-45", "f8": "5e-324", "n": "1.5", "tstz": "1935-03-30 12:00:00+00"},
    {"f4": "3.4028235e+38", "f8": "1.7976931348623157e+308", "n": "10000000000000000000000000000000"},
    {"f4": "-1.17549435e-38", "f8": "2.2250738585072014e-308", "n": "0.1"},
    {"f4": "0.1", "f8": "0.1", "tstz": "2024-11-03 01:30:00-02:30"},
]
RANDOM_ROWS = 3000


@contextlib.contextmanager
def exported_snapshot(dsn: str) -> Iterator[str]:
    """A snapshot name others can import while this transaction stays open."""
    with psycopg.connect(dsn) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        yield holder.execute("SELECT pg_export_snapshot()").fetchone()[0]
        holder.rollback()


@contextlib.contextmanager
def scratch_database(pg: str, *options: str) -> Iterator[str]:
    name = f"fv_snapval_{random.randrange(10**9)}"
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} " + " ".join(options)).format(sql.Identifier(name)))
        # Offsets like -03:30, -02:30 and, before 1935, -03:30:52: the old reader parses them all.
        admin.execute(sql.SQL("ALTER DATABASE {} SET TimeZone = 'America/St_Johns'").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(pg)
    params["dbname"] = name
    try:
        yield psycopg.conninfo.make_conninfo(**params)
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _random_text(rng: random.Random) -> str:
    alphabet = 'ab ,"\n\r\\\t.é😀NUL'
    if rng.random() < 0.2:
        return rng.choice(NASTY_TEXT)
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))


def _random_row(rng: random.Random) -> dict[str, Any]:
    def num(int_digits: int, scale: int) -> str:
        whole = str(rng.randrange(10 ** rng.randrange(1, int_digits + 1))) if int_digits else "0"
        frac = "".join(rng.choice("0123456789") for _ in range(scale))
        return ("-" if rng.random() < 0.5 else "") + whole + ("." + frac if scale else "")

    def instant(first_year: int) -> dt.datetime:
        start = dt.datetime(first_year, 1, 2)
        span = (dt.datetime(9999, 12, 30) - start) // dt.timedelta(microseconds=1)
        return start + dt.timedelta(microseconds=rng.randrange(span))

    f4 = pa.array([rng.getrandbits(32)], pa.uint32()).view(pa.float32())[0].as_py()
    f8 = pa.array([rng.getrandbits(64)], pa.uint64()).view(pa.float64())[0].as_py()
    row = {
        "i2": rng.randrange(-2**15, 2**15), "i4": rng.randrange(-2**31, 2**31), "i8": rng.randrange(-2**63, 2**63),
        "f4": repr(f4) if math.isfinite(f4) else rng.choice(["NaN", "Infinity", "-Infinity"]),
        "f8": repr(f8) if math.isfinite(f8) else rng.choice(["NaN", "-0", "1e-320"]),
        "n": num(32, rng.randrange(7)), "n12": num(10, 2), "n50": num(28, 10), "n38": num(0, 38),
        "t": _random_text(rng), "vc": _random_text(rng)[:40], "ch": _random_text(rng)[:5],
        "nm": _random_text(rng).encode()[:63].decode(errors="ignore"), "b": rng.choice(["t", "f"]),
        "d": (dt.date(1, 1, 1) + dt.timedelta(days=rng.randrange(3652058))).isoformat(),
        "ts": instant(1).isoformat(sep=" "), "tstz": instant(2).isoformat(sep=" ") + "+00",
    }
    return {k: v for k, v in row.items() if rng.random() > 0.1}  # about one value in ten NULL


@pytest.fixture(scope="module")
def typed_db(pg: str) -> Iterator[str]:
    with scratch_database(pg) as dsn:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("CREATE TABLE fv_types (id int PRIMARY KEY, "
                       + ", ".join(f"{c} {t}" for c, t in COLUMNS.items()) + ")")
            rng = random.Random(20240601)
            rows = NASTY_ROWS + [{"t": s, "vc": s[:40], "nm": s[:20], "ch": s[:5]} for s in NASTY_TEXT]
            rows += [_random_row(rng) for _ in range(RANDOM_ROWS)]
            with db.cursor().copy("COPY fv_types (id, " + ", ".join(COLUMNS) + ") FROM STDIN") as copy:
                for i, row in enumerate(rows):
                    copy.write_row([i] + [None if row.get(c) is None else str(row[c]) for c in COLUMNS])
            db.execute("CREATE TABLE fv_one (v text)")  # a NULL row of one column is an empty CSV line
            db.execute("ALTER TABLE fv_one REPLICA IDENTITY FULL")
            db.execute("INSERT INTO fv_one VALUES (NULL), (''), (NULL), ('x'), (NULL)")
        yield dsn


def _schema(dsn: str, table: str) -> TableSchema:
    with psycopg.connect(dsn) as conn:
        return describe_table(conn, table).schema


def _canonical(table: pa.Table) -> list[tuple]:
    """Rows as comparable tuples: floats by their repr, so NaN equals NaN and -0.0 differs from 0.0."""
    def value(v: Any) -> Any:
        return ("float", repr(v)) if isinstance(v, float) else v
    rows = zip(*(table.column(n).to_pylist() for n in table.column_names))
    return sorted((tuple(value(v) for v in row) for row in rows), key=repr)


def _read_both(dsn: str, table: str, **kwargs: Any) -> tuple[list[pa.Table], list[pa.Table]]:
    schema = _schema(dsn, table)
    with exported_snapshot(dsn) as name:
        old = list(read_table_per_row(dsn, name, table, schema, 1000))
        new = list(read_table(dsn, name, table, schema, **kwargs))
    return old, new


BINARY = pytest.mark.parametrize("binary", [True, False], ids=["binary", "csv"])


@BINARY
@pytest.mark.parametrize("kwargs", [
    {"chunk_rows": 500, "workers": 1},
    {"chunk_rows": 97, "workers": 3, "parallel_min_pages": 1},  # many block ranges
], ids=["serial", "parallel"])
def test_every_type_reads_as_the_per_row_reader_did(typed_db, kwargs, binary):
    kwargs = {**kwargs, "binary": binary}
    old, new = _read_both(typed_db, "public.fv_types", **kwargs)
    assert all(t.schema == old[0].schema for t in new)
    assert all(0 < t.num_rows <= kwargs["chunk_rows"] for t in new)
    assert _canonical(pa.concat_tables(new)) == _canonical(pa.concat_tables(old))
    assert sum(t.num_rows for t in new) == len(NASTY_ROWS) + len(NASTY_TEXT) + RANDOM_ROWS


@BINARY
def test_the_values_are_the_ones_written(typed_db, binary):
    # Spot checks against literal expectations, not only against the old reader.
    schema = _schema(typed_db, "public.fv_types")
    with exported_snapshot(typed_db) as name:
        table = pa.concat_tables(read_table(typed_db, name, "public.fv_types", schema, binary=binary))
    rows = {r["id"]: r for r in table.to_pylist()}
    assert all(v is None for k, v in rows[0].items() if k not in ("id", "_weight"))
    assert math.isnan(rows[1]["f4"]) and rows[1]["n38"] == Decimal("-0.00000000000000000000000000000000000001")
    assert rows[2]["i8"] == 2**63 - 1 and rows[2]["f8"] == -math.inf and rows[2]["n12"] == Decimal("9999999999.99")
    assert math.copysign(1, rows[3]["f4"]) == -1 and math.copysign(1, rows[3]["f8"]) == -1
    assert rows[3]["n"] == Decimal("12345678901234567890123456789012.123456")
    assert rows[3]["tstz"] == dt.datetime(1883, 11, 18, 12, tzinfo=dt.timezone.utc)
    assert rows[4]["ts"] == dt.datetime(2000, 2, 29, 12, 0, 0, 1)
    texts = {r["t"] for r in rows.values() if r["id"] >= len(NASTY_ROWS)}
    assert set(NASTY_TEXT) <= texts
    assert table.schema.field("n").type == pa.decimal128(38, 6)
    assert table.schema.field("n50").type == pa.decimal128(38, 10)
    assert table.schema.field("tstz").type == pa.timestamp("us", tz="UTC")


def test_well_formed_values_need_no_per_value_fallback(typed_db, monkeypatch):
    def refuse(*args: Any) -> None:
        raise AssertionError("fell back to converting value by value")
    for helper in ("_bools", "_decimals", "_floats", "_timestamps", "_dates"):
        monkeypatch.setattr(types, helper, refuse)
    schema = _schema(typed_db, "public.fv_types")
    with exported_snapshot(typed_db) as name:
        assert sum(t.num_rows for t in read_table(typed_db, name, "public.fv_types", schema)) > RANDOM_ROWS


@BINARY
def test_null_and_empty_string_in_a_one_column_table(typed_db, binary):
    old, new = _read_both(typed_db, "public.fv_one", chunk_rows=2, binary=binary)
    assert [t.num_rows for t in new] == [2, 2, 1]
    assert sorted(pa.concat_tables(new).column("v").to_pylist(), key=repr) == \
        sorted([None, "", None, "x", None], key=repr) == sorted(pa.concat_tables(old).column("v").to_pylist(), key=repr)


@pytest.mark.parametrize("pg_type, value", [
    ("numeric", "NaN"),
    ("numeric", "Infinity"),
    ("numeric", "1" + "0" * 40),                       # more digits than decimal128(38, 6) holds
    ("numeric", "12345678901234567890123456789012345.5"),  # would wrap around in Arrow's cast
    ("numeric", "1" + "0" * 32),                       # 39 digits at scale 6
    ("numeric", "0.0000001"),                          # more scale than the unconstrained default 6
    ("date", "infinity"), ("date", "-infinity"), ("date", "0044-03-15 BC"), ("date", "10000-01-01"),
    ("timestamp", "infinity"), ("timestamp", "-infinity"), ("timestamp", "0001-01-01 00:00:00 BC"),
    ("timestamptz", "infinity"),
])
@BINARY
def test_unrepresentable_values_are_refused_as_before(typed_db, pg_type, value, binary):
    with psycopg.connect(typed_db, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS fv_bad")
        db.execute(f"CREATE TABLE fv_bad (id int PRIMARY KEY, v {pg_type})")
        db.execute("INSERT INTO fv_bad SELECT g, NULL FROM generate_series(1, 50) g")
        db.execute(f"INSERT INTO fv_bad VALUES (0, %s::{pg_type})", (value,))
    schema = _schema(typed_db, "public.fv_bad")
    with exported_snapshot(typed_db) as name:
        with pytest.raises(Exception) as old:
            list(read_table_per_row(typed_db, name, "public.fv_bad", schema))
        with pytest.raises(Exception) as new:
            list(read_table(typed_db, name, "public.fv_bad", schema, binary=binary))
    assert type(new.value) is type(old.value)
    if binary and pg_type != "numeric":  # the binary path names the value in its own words
        shown = {"0044-03-15 BC": "-043-03-15", "0001-01-01 00:00:00 BC": "0000-01-01T00:00"}.get(value, value)
        assert shown in str(new.value) and "column v" in str(new.value), str(new.value)
    else:
        assert str(new.value) == str(old.value)


@BINARY
def test_a_latin1_database_reads_as_utf8(pg, binary):
    with scratch_database(pg, "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0") as dsn:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("CREATE TABLE fv_latin (id int PRIMARY KEY, t text)")
            db.execute("INSERT INTO fv_latin VALUES (1, 'café'), (2, 'ÿ,\"ß\"'), (3, '')")
        old, new = _read_both(dsn, "public.fv_latin", binary=binary)
    assert _canonical(pa.concat_tables(new)) == _canonical(pa.concat_tables(old))
    assert sorted(pa.concat_tables(new).column("t").to_pylist()) == ["", "café", 'ÿ,"ß"']


def test_csv_chunks_end_at_the_row_limit_or_the_byte_limit(monkeypatch):
    rows = [memoryview(f"{i},{'x' * (i % 50)}\n".encode()) for i in range(10_000)]
    chunks = list(snapshot._csv_chunks(iter(rows), 3000))
    assert [n for n, _ in chunks] == [3000, 3000, 3000, 1000]
    assert b"".join(text for _, text in chunks) == b"".join(rows)
    monkeypatch.setattr(snapshot, "CHUNK_BYTES", 20_000)
    chunks = list(snapshot._csv_chunks(iter(rows), 3000))
    assert b"".join(text for _, text in chunks) == b"".join(rows)
    assert all(n <= 3000 and len(text) < 20_000 + 4096 * 60 for n, text in chunks)
    assert max(len(text) for _, text in chunks[:-1]) < 40_000 and len(chunks) > 10
    assert [n for n, _ in snapshot._csv_chunks(iter(rows[:5]), 0)] == [1] * 5
    assert list(snapshot._csv_chunks(iter([]), 10)) == []
