"""Transaction assembly and delta building, on synthetic messages and on a real server's stream."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.changes import ChangeError, TransactionAssembler, to_changes, to_deltas
from freshview.schema import schema_from_ddl

REL = p.Relation(1, "public", "t", "d", (p.Column("id", 23, -1, True), p.Column("v", 1700, -1, False),
                                          p.Column("note", 25, -1, False)))
SCHEMAS = {"public.t": schema_from_ddl("id INT, v NUMERIC(10,2), note TEXT", ["id"])}


def NO_ROWS(table, keys):
    return SCHEMAS["public.t"].arrow().empty_table()


def rows(table):
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def test_a_transaction_is_released_only_at_commit():
    asm = TransactionAssembler()
    assert asm.feed(p.Begin(100, 0, 7)) is None
    assert asm.feed(p.Insert(REL, ["1", "2.50", "a"])) is None
    txn = asm.feed(p.Commit(90, 110, 0))
    assert txn is not None and txn.end_lsn == 110 and txn.size == 1


def test_streamed_transaction_with_aborted_subtransaction():
    asm = TransactionAssembler()
    asm.feed(p.StreamStart(7, True))
    asm.feed(p.Insert(REL, ["1", "1", "x"], xid=7))
    asm.feed(p.Insert(REL, ["2", "2", "y"], xid=8))   # in a savepoint that rolls back
    asm.feed(p.StreamStop())
    asm.feed(p.StreamStart(9, True))                  # another transaction, interleaved
    asm.feed(p.Insert(REL, ["5", "5", "z"], xid=9))
    asm.feed(p.StreamStop())
    asm.feed(p.StreamAbort(7, 8))
    asm.feed(p.StreamAbort(9, 9))                     # the whole other transaction aborts
    txn = asm.feed(p.StreamCommit(7, 200, 210, 0))
    deltas = to_deltas(txn, SCHEMAS, NO_ROWS)
    assert rows(deltas["public.t"]) == [(1, Decimal("1.00"), "x", 1)]
    assert asm.feed(p.StreamCommit(9, 300, 310, 0)).size == 0


def test_old_rows_come_from_the_engine_under_default_identity():
    asm = TransactionAssembler()
    asm.feed(p.Begin(0, 0, 1))
    asm.feed(p.Update(REL, ["1", "3.00", p.UNCHANGED_TOAST]))               # no old row at all
    asm.feed(p.Delete(REL, ["2", None, None], old_is_key_only=True))        # key only
    asm.feed(p.Insert(REL, ["3", "1", "n"]))
    asm.feed(p.Update(REL, ["4", "1", "n"], old=["3", None, None], old_is_key_only=True))  # key change
    txn = asm.feed(p.Commit(0, 10, 0))
    known = pa.table({"id": pa.array([1, 2], pa.int32()), "v": [Decimal("1.00"), Decimal("9.00")],
                      "note": ["big", "b"]})
    deltas = to_deltas(txn, SCHEMAS, lambda table, keys: known.filter(pc.is_in(known["id"], keys["id"])))
    assert rows(deltas["public.t"]) == sorted([
        (1, Decimal("1.00"), "big", -1), (1, Decimal("3.00"), "big", 1),   # TOAST value carried over
        (2, Decimal("9.00"), "b", -1),
        (3, Decimal("1.00"), "n", 1), (3, Decimal("1.00"), "n", -1), (4, Decimal("1.00"), "n", 1),
    ], key=repr)
    asm.feed(p.Begin(0, 0, 2))
    asm.feed(p.Delete(REL, ["9", None, None], old_is_key_only=True))
    with pytest.raises(ChangeError, match="REPLICA IDENTITY FULL"):
        to_deltas(asm.feed(p.Commit(0, 20, 0)), SCHEMAS, NO_ROWS)


def test_changes_without_their_old_rows_go_by_key_and_ask_nothing():
    """Under REPLICA IDENTITY DEFAULT (no TOAST left out) a key whose old row the stream did not send goes
    to the engine by key: its row after the batch as an upsert, or a delete, and a check it is held;
    the connector reads no row (the engine looks each key up once, in its step)."""
    def no_lookup(table, keys):
        raise AssertionError("the connector asked for old rows")

    for n in (1, 200):  # the row path and the column-at-a-time path
        asm = TransactionAssembler()
        asm.feed(p.Begin(0, 0, 1))
        asm.feed(p.Update(REL, ["1", "3.00", "x"]))                              # no old row: by key
        asm.feed(p.Update(REL, ["1", "4.00", "y"]))                              # again, in the batch
        asm.feed(p.Delete(REL, ["2", None, None], old_is_key_only=True))         # key only: by key
        asm.feed(p.Update(REL, ["6", "1", "m"], old=["7", None, None], old_is_key_only=True))  # moved
        asm.feed(p.Update(REL, ["8", "2", "o"], old=["8", "1", "o"]))            # old row sent: as rows
        for i in range(n):
            asm.feed(p.Insert(REL, [str(100 + i), "1", "n"]))
        change = to_changes(asm.feed(p.Commit(0, 10, 0)), SCHEMAS, no_lookup)["public.t"]
        assert rows(change.upserts) == [(1, Decimal("4.00"), "y")], n
        assert rows(change.deletes) == [(2,), (7,)], n
        assert rows(change.present) == [(1,), (2,), (7,)], n
        assert [r for r in rows(change.rows) if r[0] < 100] == sorted([
            (6, Decimal("1.00"), "m", 1), (8, Decimal("1.00"), "o", -1), (8, Decimal("2.00"), "o", 1)], key=repr), n
        assert len(rows(change.rows)) == 3 + n


def test_a_batch_sees_rows_its_earlier_transactions_wrote():
    asm = TransactionAssembler()
    asm.feed(p.Begin(0, 0, 1))
    asm.feed(p.Insert(REL, ["7", "1.5", "a"]))
    first = asm.feed(p.Commit(0, 10, 0))
    asm.feed(p.Begin(0, 0, 2))
    asm.feed(p.Update(REL, ["7", "2", p.UNCHANGED_TOAST]))               # old row: from the batch
    asm.feed(p.Delete(REL, ["8", None, None], old_is_key_only=True))      # old row: from the engine
    second = asm.feed(p.Commit(0, 20, 0))
    asked = []

    def lookup(table, keys):
        asked.append(keys.column("id").to_pylist())
        return pa.table({"id": pa.array([8], pa.int32()), "v": [Decimal("4.00")], "note": ["z"]})

    delta = to_deltas([first, second], SCHEMAS, lookup)["public.t"]
    assert asked == [[8]]
    assert rows(delta) == sorted([(7, Decimal("1.50"), "a", 1), (7, Decimal("1.50"), "a", -1),
                                  (7, Decimal("2.00"), "a", 1), (8, Decimal("4.00"), "z", -1)], key=repr)


def test_truncate_drops_earlier_changes_of_the_table():
    asm = TransactionAssembler()
    asm.feed(p.Begin(0, 0, 1))
    asm.feed(p.Insert(REL, ["1", "1", "a"]))
    asm.feed(p.Truncate((REL,), False, False))
    asm.feed(p.Insert(REL, ["2", "2", "b"]))
    txn = asm.feed(p.Commit(0, 10, 0))
    assert txn.truncated == ["public.t"]
    assert rows(to_deltas(txn, SCHEMAS, NO_ROWS)["public.t"]) == [(2, Decimal("2.00"), "b", 1)]


def test_a_real_stream_with_savepoints_and_streaming(pg):
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS fv_ch")
        c.execute("CREATE TABLE fv_ch (id int PRIMARY KEY, v numeric(10,2), note text)")
        c.execute("DROP PUBLICATION IF EXISTS fv_ch_pub")
        c.execute("CREATE PUBLICATION fv_ch_pub FOR TABLE fv_ch")
        c.execute("SELECT pg_create_logical_replication_slot('fv_ch_slot', 'pgoutput')")
        try:
            with c.transaction():
                c.execute("INSERT INTO fv_ch SELECT g, g, md5(g::text) FROM generate_series(1, 2000) g")
                with pytest.raises(psycopg.errors.DivisionByZero):
                    with c.transaction():  # a savepoint that rolls back
                        c.execute("INSERT INTO fv_ch SELECT g, g, 'x' FROM generate_series(5001, 6000) g")
                        c.execute("SELECT 1/0")
                c.execute("UPDATE fv_ch SET v = v + 1 WHERE id <= 10")
            c.execute("SET logical_decoding_work_mem = '64kB'")
            data = c.execute("SELECT data FROM pg_logical_slot_get_binary_changes('fv_ch_slot', NULL, NULL, "
                             "'proto_version', '2', 'publication_names', 'fv_ch_pub', 'streaming', 'on')").fetchall()
            decoder, asm, txns = p.Decoder(), TransactionAssembler(), []
            for (payload,) in data:
                done = asm.feed(decoder.decode(bytes(payload)))
                if done is not None:
                    txns.append(done)
            assert len(txns) == 1
            current = {}
            delta = to_deltas(txns[0], {"public.fv_ch": schema_from_ddl("id INT, v NUMERIC(10,2), note TEXT", ["id"])},
                              NO_ROWS)["public.fv_ch"]
            for r in delta.to_pylist():
                key = (r["id"], r["v"], r["note"])
                current[key] = current.get(key, 0) + r["_weight"]
            live = sorted(k for k, w in current.items() if w)
            assert live == sorted(tuple(r) for r in c.execute("SELECT id, v, note FROM fv_ch").fetchall())
        finally:
            c.execute("SELECT pg_drop_replication_slot('fv_ch_slot')")
            c.execute("DROP PUBLICATION fv_ch_pub")
            c.execute("DROP TABLE fv_ch")


def test_bulk_changes_to_distinct_keys_take_one_lookup_and_match_the_row_path():
    """Updates/deletes of distinct keys go column-at-a-time; the answer must equal the row-by-row path."""
    engine = pa.table({"id": pa.array([1, 2, 3, 4], pa.int32()),
                       "v": [Decimal("1.00"), Decimal("2.00"), Decimal("3.00"), Decimal("4.00")],
                       "note": ["a", None, "c", "d"]})

    def lookup(table, keys):
        asked.append(sorted(keys.column("id").to_pylist()))
        return engine.filter(pc.is_in(engine["id"], keys["id"]))

    def feed(changes):
        asm = TransactionAssembler()
        asm.feed(p.Begin(0, 0, 1))
        for change in changes:
            asm.feed(change)
        return asm.feed(p.Commit(0, 10, 0))

    bulk = [p.Update(REL, ["1", "1.50", "a"]),                                   # key kept, no old row sent
            p.Update(REL, ["9", "2.00", None], old=["2", None, None], old_is_key_only=True),  # key changes
            p.Delete(REL, ["3", None, None], old_is_key_only=True),
            p.Insert(REL, ["7", "7", "x"])]
    asked = []
    fast = rows(to_deltas(feed(bulk), SCHEMAS, lookup)["public.t"])
    assert asked == [[1, 2, 3]]
    assert fast == sorted([(1, Decimal("1.00"), "a", -1), (1, Decimal("1.50"), "a", 1),
                           (2, Decimal("2.00"), None, -1), (9, Decimal("2.00"), None, 1),
                           (3, Decimal("3.00"), "c", -1), (7, Decimal("7.00"), "x", 1)], key=repr)
    # The same key twice (insert then update) depends on order: the row-by-row path, same kind of answer.
    asked = []
    ordered = rows(to_deltas(feed([p.Insert(REL, ["8", "1", "n"]), p.Update(REL, ["8", "2", "n"]),
                                   p.Update(REL, ["4", "5", "d"])]), SCHEMAS, lookup)["public.t"])
    assert asked == [[4]]
    assert ordered == sorted([(8, Decimal("1.00"), "n", 1), (8, Decimal("1.00"), "n", -1), (8, Decimal("2.00"), "n", 1),
                              (4, Decimal("4.00"), "d", -1), (4, Decimal("5.00"), "d", 1)], key=repr)
    # A missing old row is still reported precisely.
    with pytest.raises(ChangeError, match="no old row for key"):
        to_deltas(feed([p.Delete(REL, ["42", None, None], old_is_key_only=True)]), SCHEMAS, lookup)
