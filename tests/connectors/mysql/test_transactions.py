"""The transaction assembler on synthetic event sequences (no server)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from freshview.connectors.mysql.catalog import TableName
from freshview.connectors.mysql.transactions import (Begin, BinlogPosition, BinlogProtocolError, Query, RowChanges,
                                                     Rows, TransactionAssembler, Xid, advance_gtid_state)

T = TableName("app", "orders")
U = TableName("app", "Other Table")
R = TableName("freshview", "result")  # a result table: never followed
START = BinlogPosition("0-1-9", "binlog.000001", 400)


def ins(*ids, kind="insert"):
    return RowChanges.from_library(kind, [{"values": {"id": i}, "none_sources": {}} for i in ids])


def ids(images_list):
    return [v["id"] for images in images_list for v, _ in images.images]


def feed_all(asm, events, file="binlog.000001"):
    out = []
    for offset, event in enumerate(events, start=1000):
        txn = asm.feed(event, file, offset)
        if txn is not None:
            out.append(txn)
    return out


def test_a_multi_statement_transaction_is_handed_out_whole_at_its_xid():
    asm = TransactionAssembler(START, {T, U})
    events = [Begin("0-1-10"), Rows(T, ins(1, 2)), Rows(U, ins(3, kind="delete")),
              Rows(T, RowChanges.from_library("update", [{"before_values": {"id": 1}, "after_values": {"id": 5}}]))]
    assert feed_all(asm, events) == []
    assert asm.in_transaction and asm.position == START
    txn = asm.feed(Xid(timestamp=1_700_000_000), "binlog.000001", 2000)
    assert txn is not None and not asm.in_transaction
    assert txn.gtid == "0-1-10"
    assert txn.position == BinlogPosition("0-1-10", "binlog.000001", 2000) == asm.position
    assert [(c.kind, len(c)) for c in txn.changes[T]] == [("insert", 2), ("update", 1)]
    assert [(c.kind, len(c)) for c in txn.changes[U]] == [("delete", 1)]
    assert txn.row_count == 4 and txn.tables == {T, U}
    assert txn.commit_time.timestamp() == 1_700_000_000


def test_consecutive_events_of_one_kind_form_one_run():
    asm = TransactionAssembler(START, {T})
    [txn] = feed_all(asm, [Begin("0-1-10"), Rows(T, ins(1)), Rows(T, ins(2)),
                           Rows(T, ins(1, kind="delete")), Rows(T, ins(3)), Xid()])
    assert [(c.kind, ids(c.after or c.before)) for c in txn.changes[T]] == \
        [("insert", [1, 2]), ("delete", [1]), ("insert", [3])]


def test_tables_not_followed_are_ignored_but_their_transactions_advance_the_position():
    asm = TransactionAssembler(START, {T})
    out = feed_all(asm, [Begin("0-1-10"), Rows(R, ins(1)), Xid(),
                         Begin("0-1-11"), Rows(T, ins(2)), Rows(R, ins(9)), Xid()])
    assert len(out) == 1 and out[0].gtid == "0-1-11" and set(out[0].changes) == {T}
    assert asm.position.gtid == "0-1-11"


def test_an_idle_transaction_without_followed_changes_moves_the_position():
    asm = TransactionAssembler(START, {T})
    assert feed_all(asm, [Begin("0-1-10"), Rows(R, ins(1)), Xid()]) == []
    assert asm.position == BinlogPosition("0-1-10", "binlog.000001", 1002)


def test_non_transactional_engines_end_with_a_commit_query():
    asm = TransactionAssembler(START, {T})
    [txn] = feed_all(asm, [Begin("0-1-10"), Rows(T, ins(1)), Query("COMMIT", "app")])
    assert txn.row_count == 1
    [txn] = feed_all(asm, [Begin("0-1-11"), Rows(T, ins(1, kind="delete")), Query("ROLLBACK", "app")])
    assert txn.changes[T][0].kind == "delete"  # a non-transactional table's rows stay written


def test_truncate_of_a_followed_table_is_reported():
    asm = TransactionAssembler(START, {T})
    [txn] = feed_all(asm, [Begin("0-1-10", standalone=True), Query("TRUNCATE TABLE orders", "app")])
    assert txn.truncated == (T,) and txn.row_count == 0
    assert feed_all(asm, [Begin("0-1-11", standalone=True), Query("truncate `app`.`x`", "other")]) == []
    [txn] = feed_all(asm, [Begin("0-1-12", standalone=True), Query("/* c */ TRUNCATE app.orders", "x")])
    assert txn.truncated == (T,) and asm.position.gtid == "0-1-12"


@pytest.mark.parametrize("statement, database, reported", [
    ("ALTER TABLE orders ADD COLUMN x INT", "app", True),
    ("ALTER TABLE `app`.`orders` DROP COLUMN amount", "other", True),
    ("DROP TABLE IF EXISTS `app`.`orders`, app.b", "", True),
    ("RENAME TABLE app.orders TO app.orders_old", "", True),
    ("ALTER TABLE `Other Table` ADD x INT", "app", True),
    ("ALTER TABLE other_db.orders ADD x INT", "app", False),
    ("CREATE TABLE app.audit (note TEXT DEFAULT 'orders')", "", False),  # the name only in a string
    ("DROP TABLE unrelated", "app", False),
])
def test_ddl_touching_followed_tables_is_reported(statement, database, reported):
    asm = TransactionAssembler(START, {T, U})
    out = feed_all(asm, [Begin("0-1-10", standalone=True), Query(statement, database)])
    assert asm.position.gtid == "0-1-10"
    if reported:
        [txn] = out
        assert txn.ddl[0].statement == statement and set(txn.ddl[0].tables) <= {T, U}
        assert txn.row_count == 0
    else:
        assert out == []


def test_a_transaction_sent_again_after_a_reconnect_replaces_the_partial_copy():
    asm = TransactionAssembler(START, {T})
    feed_all(asm, [Begin("0-1-10"), Rows(T, ins(1, 2))])
    [txn] = feed_all(asm, [Begin("0-1-10"), Rows(T, ins(1, 2)), Rows(T, ins(3)), Xid()])
    assert ids(txn.changes[T][0].after) == [1, 2, 3]


def test_rows_outside_a_transaction_are_refused():
    asm = TransactionAssembler(START, {T})
    with pytest.raises(BinlogProtocolError, match="Rows event outside a transaction at binlog.000001:1000"):
        feed_all(asm, [Rows(T, ins(1))])
    assert feed_all(asm, [Query("BEGIN", "app")]) == []


def test_follow_changes_the_filter():
    asm = TransactionAssembler(START, set())
    assert feed_all(asm, [Begin("0-1-10"), Rows(T, ins(1)), Xid()]) == []
    asm.follow({T})
    assert len(feed_all(asm, [Begin("0-1-11"), Rows(T, ins(1)), Xid()])) == 1


def test_gtid_state_keeps_one_entry_per_domain():
    assert advance_gtid_state("", "0-1-5") == "0-1-5"
    assert advance_gtid_state("0-1-5", "0-2-6") == "0-2-6"
    assert advance_gtid_state("0-1-5,2-1-7", "1-3-1") == "0-1-5,1-3-1,2-1-7"
    assert advance_gtid_state("0-1-5,10-1-7", "2-1-1") == "0-1-5,2-1-1,10-1-7"


@given(st.lists(st.tuples(st.integers(1, 20), st.integers(4, 10**9)), min_size=2, max_size=6))
def test_positions_order_by_file_number_then_offset_and_round_trip(places):
    positions = [BinlogPosition(f"0-1-{i}", f"binlog.{n:06d}", off) for i, (n, off) in enumerate(places)]
    for p in positions:
        assert BinlogPosition.from_text(p.to_text()) == p
    ordered = sorted(positions)
    assert [(p.file, p.offset) for p in ordered] == sorted((p.file, p.offset) for p in positions)
    assert BinlogPosition("0-1-1", "binlog.000009", 5) < BinlogPosition("0-1-2", "binlog.000010", 4)


def test_malformed_positions_are_refused():
    for text in ("", "0-1-5", "0-1-5@binlog", "0-1-5@binlog.000001:x"):
        with pytest.raises(ValueError, match="not a binlog position"):
            BinlogPosition.from_text(text)


def test_a_renamed_followed_table_is_followed_under_its_new_name_in_the_streams_order():
    """Rows of a followed table renamed by RENAME TABLE / ALTER TABLE ... RENAME are handed under the name
    it is followed by, from the statement on; a new table taking the old name is not followed."""
    v2, v3, new = TableName("app", "orders_v2"), TableName("archive", "orders_v3"), TableName("app", "orders")
    asm = TransactionAssembler(START, {T})
    events = [Begin("0-1-10"), Rows(T, ins(1)), Xid(),
              Begin("0-1-11", standalone=True), Query("RENAME TABLE orders TO orders_v2", "app"),
              Begin("0-1-12"), Rows(v2, ins(2)), Rows(T, ins(99)), Xid(),  # (a new `orders` is another table)
              Begin("0-1-13", standalone=True), Query("ALTER TABLE orders_v2 ADD x int, RENAME TO archive.orders_v3",
                                                      "app"),
              Begin("0-1-14"), Rows(v3, ins(3)), Rows(v2, ins(98)), Xid()]
    first, ddl, second, again, third = feed_all(asm, events)
    assert ids(first.changes[T][0].after) == [1] and ddl.ddl[0].tables == (T,)
    assert list(second.changes) == [T] and ids(second.changes[T][0].after) == [2]
    assert again.ddl[0].tables == (T,) and ids(third.changes[T][0].after) == [3] and list(third.changes) == [T]
    assert asm.followed == {v3} and asm.aliases == {v3: T}
    asm.rename({T: T})  # the service has not judged the renames yet: they stay
    assert asm.aliases == {v3: T}
    asm.rename({v3: T})  # it has
    asm.rename({})  # then follows the table anew under its name now, and a new `orders` too
    asm.follow({v3, new})
    assert asm.followed == {v3, new} and asm.followed_name(v3) == v3 and asm.followed_name(new) == T
    seeded = TransactionAssembler(START, {T})
    seeded.rename({v2: T})  # ``Source.rename`` after a restart
    [txn] = feed_all(seeded, [Begin("0-1-20"), Rows(v2, ins(5)), Xid()])
    assert list(txn.changes) == [T]
