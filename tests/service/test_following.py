"""Following decisions (``following``) and repair decisions (``recovery``), without a database."""

from __future__ import annotations

from dataclasses import dataclass

from freshview.connectors.base import Attached, Transaction
from freshview.schema import Column, TableSchema, parse_type
from freshview.service import following, recovery


@dataclass(frozen=True, order=True)
class Pos:
    value: int

    def to_text(self) -> str:
        return str(self.value)


INT, TEXT = parse_type("integer"), parse_type("text")
SCHEMA = TableSchema((Column("id", INT, False), Column("name", TEXT)), ("id",))


def test_changes_before_a_tables_snapshot_are_ignored():
    txn = Transaction(Pos(10), 0.0, {"public.a": 2, "public.b": 3, "public.c": 1}, frozenset({"public.b"}))
    kept = following.relevant(txn, {"public.a": Pos(5), "public.b": Pos(10)})  # b's snapshot holds txn 10
    assert dict(kept.rows) == {"public.a": 2} and kept.truncated == frozenset() and kept.size == 2
    later = following.relevant(Transaction(Pos(11), 0.0, {"public.b": 3}, frozenset({"public.b"})),
                               {"public.b": Pos(10)})
    assert dict(later.rows) == {"public.b": 3} and later.truncated == {"public.b"}


def test_only_truncating_a_followed_table_steps_alone():
    txn = Transaction(Pos(1), 0.0, {}, frozenset({"public.x"}))
    assert following.truncates(txn, {"public.x": Pos(0)}) and not following.truncates(txn, {"public.y": Pos(0)})


def test_ddl_that_breaks_a_followed_table_is_named():
    assert following.incompatible({"id": INT, "name": TEXT, "extra": INT}, SCHEMA) is None
    assert following.incompatible({"id": INT}, SCHEMA) == "column name was dropped or renamed"
    assert following.incompatible({"id": INT, "name": None}, SCHEMA) == "column name now has an unsupported type"
    assert following.incompatible({"id": TEXT, "name": TEXT}, SCHEMA) == \
        f"column id changed type from {INT} to {TEXT}"


def test_a_lost_position_or_engine_ahead_of_the_database_rebuilds():
    assert recovery.rebuild_reason(Attached(), Pos(3), Pos(5)) is None
    assert recovery.rebuild_reason(Attached(), None, Pos(5)) is None
    assert recovery.rebuild_reason(Attached(created=True), None, None) is None  # first start
    assert recovery.rebuild_reason(Attached(lost="slot gone"), Pos(3), Pos(5)) == "slot gone"
    assert recovery.rebuild_reason(Attached(), Pos(6), Pos(5)) == recovery.AHEAD
    assert recovery.rebuild_reason(Attached(), Pos(6), None) == recovery.AHEAD


def test_reconciliation_keeps_active_and_rebuilding_views_and_drops_readers_first():
    rows = [("public.a", "SELECT 1", "active"), ("public.b", "SELECT 2", "failed"),
            ("public.c", "SELECT 3", "rebuilding")]
    assert recovery.wanted_views(rows) == {"public.a": "SELECT 1", "public.c": "SELECT 3"}
    assert recovery.views_to_drop(["a", "b", "b_reader", "c"], {"a", "c"}) == ["b_reader", "b"]
