"""The decisions of ``connectors/mysql/source.py`` (no server): lost positions, reported positions,
the core's view of a binlog transaction, column definitions after DDL."""

from __future__ import annotations

import datetime as dt

from freshview.connectors.mysql.catalog import TableName
from freshview.connectors.mysql.source import (column_definitions, commit_time, lost_reason, passed_position,
                                               to_transaction)
from freshview.connectors.mysql.transactions import BinlogPosition, MySqlTransaction, RowChanges
from freshview.schema import SqlType

P1 = BinlogPosition("0-1-9", "binlog.000001", 400)
P2 = BinlogPosition("0-1-12", "binlog.000002", 100)


def test_a_position_in_a_purged_binlog_is_lost():
    assert lost_reason(P2, {"binlog.000002", "binlog.000003"}) is None
    reason = lost_reason(P1, {"binlog.000002"})
    assert reason is not None and "binlog.000001" in reason and "purged" in reason


def test_positions_passed_without_followed_changes_are_reported_at_most_every_second():
    assert passed_position(P2, P1, last_report=10.0, now=10.5) is None  # too soon
    assert passed_position(P2, P1, last_report=10.0, now=11.0) == P2
    assert passed_position(P2, None, last_report=10.0, now=11.0) == P2
    assert passed_position(P2, P2, last_report=10.0, now=20.0) is None  # nothing new
    assert passed_position(P1, P2, last_report=10.0, now=20.0) is None  # never backwards


def test_the_core_sees_rows_per_table_truncates_and_the_payload():
    orders, events = TableName("app", "orders"), TableName("app", "events")
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    txn = MySqlTransaction(P2, "0-1-12", when,
                           {orders: [RowChanges.from_library("insert", [{"values": {}}] * 2),
                                    RowChanges.from_library("delete", [{"values": {}}])]},
                           truncated=(events,))
    core = to_transaction(txn, {"app.events": {"kind": SqlType("text")}})
    assert core.position == P2 and core.commit_time == when.timestamp()
    assert core.rows == {"app.orders": 3} and core.truncated == frozenset({"app.events"})
    assert core.definitions == {"app.events": {"kind": SqlType("text")}} and core.payload is txn


def test_column_definitions_mark_unsupported_types():
    rows = [("id", "int", "int(11)", 10, 0, None, None, "NO"),
            ("blob", "blob", "blob", None, None, None, None, "YES"),
            ("name", "varchar", "varchar(20)", None, None, "utf8mb4", "utf8mb4_general_ci", "YES")]
    found = column_definitions("app.t", rows)
    assert found["id"] == SqlType("int4") and found["blob"] is None
    assert found["name"] == SqlType("text", collation="utf8mb4_general_ci")


def test_commit_times_within_the_binlogs_second_come_from_the_arrival():
    assert commit_time(100.0, None) == 100.0
    assert commit_time(100.0, 100.004) == 100.004  # kept up: arrived 4 ms after a commit in second 100
    assert commit_time(100.0, 107.5) == 101.0  # behind: the latest the commit can have been
