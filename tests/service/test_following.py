"""Following decisions (``following``) and repair decisions (``recovery``), without a database."""

from __future__ import annotations

from dataclasses import dataclass

from freshview.connectors.base import Attached, Recheck, Transaction
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


NUM = parse_type("numeric(10,2)")
ORDERS = TableSchema((Column("id", INT, False), Column("amount", NUM), Column("note", TEXT)), ("id",))
IDENTITY = (("relation", "16384"), ("primary key", "id"), ("replica identity", "default"))


def effect(read, columns=None, name="public.orders", identity=IDENTITY, refusal=None, statement=None):
    now = Recheck(name, columns if columns is not None else {"id": INT, "amount": NUM, "note": TEXT}, identity,
                  refusal)
    return following.ddl_effect("public.orders", ORDERS, read, now, IDENTITY, statement)


def test_ddl_on_columns_the_views_read_fails_them_naming_the_change():
    read = {"id", "amount"}
    assert effect(read) is None
    assert effect(read, {"id": INT, "amount": NUM, "note": TEXT, "extra": INT}) is None  # ADD COLUMN
    dropped = effect(read, {"id": INT, "note": TEXT})
    assert isinstance(dropped, following.Fail) and "column amount of public.orders was dropped" in dropped.error
    retyped = effect(read, {"id": INT, "amount": parse_type("double precision"), "note": TEXT})
    assert isinstance(retyped, following.Fail)
    assert "column amount of public.orders changed type from numeric(10,2) to double precision" in retyped.error
    unsupported = effect(read, {"id": INT, "amount": None, "note": TEXT})
    assert "column amount of public.orders now has a type freshview does not maintain" in unsupported.error
    assert retyped.error.startswith("freshview: column amount of public.orders ")
    assert f"the view cannot follow this change: give it a query for the new definition with CALL " \
           f"freshview.alter_view('{following.VIEW}', ...)" in retyped.error
    named = effect(read, {"id": INT, "note": TEXT}, statement="ALTER TABLE orders DROP COLUMN amount")
    assert "(by `ALTER TABLE orders DROP COLUMN amount`)" in named.error


def test_ddl_on_columns_no_view_reads_follows_the_table_anew():
    read = {"id", "amount"}
    dropped = effect(read, {"id": INT, "amount": NUM})
    assert isinstance(dropped, following.Refollow) and "column note of public.orders was dropped" in dropped.reason
    retyped = effect(read, {"id": INT, "amount": NUM, "note": INT})
    assert isinstance(retyped, following.Refollow) and "column note of public.orders changed type" in retyped.reason
    key = effect(read, identity=(("relation", "16384"), ("primary key", "id, note"), ("replica identity", "default")))
    assert isinstance(key, following.Refollow) and key.reason == "its primary key changed"
    recreated = effect(read, identity=(("relation", "16999"), ("primary key", "id"), ("replica identity", "default")))
    assert isinstance(recreated, following.Refollow) and recreated.reason == "its relation changed"
    assert effect(read, identity=()) is None  # the stream's definition alone: no identity to compare


def test_renamed_tables_and_columns_are_followed_by_name_mappings():
    read = {"id", "amount"}
    table = following.ddl_effect("public.orders", ORDERS, read, Recheck(
        "sales.orders2", {"id": INT, "amount": NUM, "note": TEXT}, IDENTITY), IDENTITY, "ALTER TABLE ...")
    assert table == following.Rename("public.orders", "sales.orders2", {}, {},
                                     "public.orders was renamed to sales.orders2 (by `ALTER TABLE ...`)")
    column = effect(read, {"id": INT, "total": NUM, "note": TEXT})
    assert column == following.Rename("public.orders", "public.orders", {"amount": "total"}, {"amount": "total"},
                                      "column amount of public.orders was renamed to total")
    key = effect(read, {"oid": INT, "amount": NUM, "note": TEXT}, identity=(
        ("relation", "16384"), ("primary key", "oid"), ("replica identity", "default")))  # the key renamed: no refollow
    assert isinstance(key, following.Rename) and key.mapping == {"id": "oid"}
    # A second rename, from the names as last seen (the mapping composes: engine name -> name now).
    again = following.ddl_effect("public.orders", ORDERS, read, Recheck(
        "public.orders3", {"id": INT, "sum": NUM, "note": TEXT}, IDENTITY), IDENTITY, None,
        ["id", "total", "note"], "sales.orders2", {"amount": "total"})
    assert again == following.Rename("sales.orders2", "public.orders3", {"total": "sum"}, {"amount": "sum"},
                                     "sales.orders2 was renamed to public.orders3; column total of public.orders3 "
                                     "was renamed to sum")
    back = following.ddl_effect("public.orders", ORDERS, read, Recheck(
        "public.orders", {"id": INT, "amount": NUM, "note": TEXT}, IDENTITY), IDENTITY, None,
        ["id", "total", "note"], None, {"amount": "total"})
    assert back is not None and back.mapping == {} and back.columns == {"total": "amount"}
    # An unread column the engine does not keep renamed, dropped or retyped: nothing to do.
    kept = ORDERS.projected({"id", "amount"})
    assert following.ddl_effect("public.orders", kept, read, Recheck(
        "public.orders", {"id": INT, "amount": NUM, "memo": INT}, IDENTITY), IDENTITY, None,
        ["id", "amount", "note"]) is None
    # Renamed at once with a column no view reads but the engine keeps dropped: followed anew, renamed first.
    both = following.ddl_effect("public.orders", ORDERS, read, Recheck(
        "public.o2", {"id": INT, "amount": NUM}, IDENTITY), IDENTITY, None, ["id", "amount", "note"])
    assert isinstance(both, following.Refollow) and both.rename is not None and both.rename.name == "public.o2"
    # PostgreSQL's attnums tell a rename from a drop even with other changes seen at once.
    places = Recheck("public.orders", {"oid": INT, "amount": NUM, "extra": INT},
                     (("relation", "16384"), ("primary key", "oid"), ("replica identity", "default")), places=(1, 2, 4))
    attnums = following.ddl_effect("public.orders", ORDERS, read, places, IDENTITY, None, ["id", "amount", "note"],
                                   None, None, [1, 2, 3])
    assert isinstance(attnums, following.Refollow) and attnums.rename.mapping == {"id": "oid"}  # (note, kept, dropped)
    assert following.ddl_effect("public.orders", ORDERS.projected({"id", "amount"}), read, places, IDENTITY, None,
                                ["id", "amount", "note"], None, None, [1, 2, 3]).mapping == {"id": "oid"}
    # A column dropped and one of another type added at its place is no rename.
    swapped = effect(read, {"id": INT, "total": INT, "note": TEXT})
    assert isinstance(swapped, following.Fail) and "column amount of public.orders was dropped" in swapped.error
    assert swapped.columns == {"amount"}  # only the views reading it fail
    both = effect(read, {"note": TEXT})
    assert both.columns == {"id", "amount"} and "column id of" in both.error and "column amount of" in both.error
    assert effect(read, name=None).columns == frozenset()  # the table gone: every view reading it


def test_an_alter_table_explains_a_new_creation_time_a_recreated_table_does_not():
    made = (("primary key", "id"), ("creation time", "2026-11-29 00:00:01"))
    remade = (("primary key", "id"), ("creation time", "2026-11-29 00:00:09"))
    now = Recheck("app.orders", {"id": INT, "amount": NUM, "note": TEXT, "x": INT}, remade)
    judge = lambda statement: following.ddl_effect("app.orders", ORDERS, {"id"}, now, made, statement)  # noqa: E731
    assert judge("ALTER TABLE orders ADD COLUMN x int, ALGORITHM=INSTANT") is None
    assert judge("/* migration */ alter table orders add x int") is None
    assert isinstance(judge(None), following.Refollow)  # (no statement: the catalog alone cannot tell)
    assert judge("DROP TABLE orders").reason == ("its creation time changed; app.orders was dropped and created again "
                                                 "(by `DROP TABLE orders`)")
    assert isinstance(judge("CREATE TABLE orders (id int primary key)"), following.Refollow)


def test_a_statement_creating_another_table_that_names_a_followed_one_changes_nothing():
    # The binlog reports a statement for every followed name in it: a result table with a column called
    # ``orders`` (the demo's customer_lifetime) must not re-create shop.orders and recompute its views.
    same = Recheck("shop.orders", {"id": INT, "amount": NUM, "note": TEXT}, (("primary key", "id"),))
    judge = lambda statement: following.ddl_effect("shop.orders", ORDERS, {"id"}, same, (("primary key", "id"),),
                                                   statement)  # noqa: E731
    assert judge("CREATE TABLE `shop`.`customer_lifetime` (`_fv_key` binary(16), `orders` bigint)") is None
    assert judge("DROP TABLE IF EXISTS `shop`.`_fv_old_1` /* orders */") is None
    assert judge("CREATE TABLE orders2 LIKE orders") is None
    assert isinstance(judge("DROP TABLE IF EXISTS a, `shop`.`orders`"), following.Refollow)
    assert isinstance(judge("create or replace table Orders (id int)"), following.Refollow)


def test_a_dropped_or_unfollowable_table_fails_its_views():
    gone = effect(set(), name=None, statement="DROP TABLE orders")
    assert gone.error.startswith("freshview: public.orders no longer exists (dropped, or renamed and the new name "
                                 "not known) (by `DROP TABLE orders`)")
    lost = effect(set(), refusal="public.orders has no primary key and REPLICA IDENTITY is not FULL ...")
    assert lost.error == ("freshview: public.orders can no longer be followed: public.orders has no primary key and "
                          "REPLICA IDENTITY is not FULL ...")


def test_a_transaction_with_ddl_of_a_followed_table_steps_alone():
    txn = Transaction(Pos(1), 0.0, {"public.x": 1}, ddl={"public.x": None})
    assert following.alters(txn, {"public.x": Pos(0)}) and not following.alters(txn, {"public.y": Pos(0)})


def test_only_definitions_other_than_the_followed_one_are_looked_at():
    assert not following.differs({"id": INT, "name": TEXT, "extra": INT}, SCHEMA)
    assert following.differs({"id": INT}, SCHEMA)
    assert following.differs({"id": INT, "name": None}, SCHEMA)
    assert following.differs({"id": TEXT, "name": TEXT}, SCHEMA)


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


def test_a_table_keeps_the_columns_read_and_its_key():
    wide = TableSchema((Column("id", INT, False), Column("a", TEXT), Column("b", INT), Column("c", TEXT)), ("id",))
    assert following.kept_columns(wide, None) == wide
    assert following.kept_columns(wide, {"c", "a"}).names == ["id", "a", "c"]
    assert following.kept_columns(wide, {"c"}).primary_key == ("id",)
    assert following.kept_columns(wide, set()).names == ["id"]  # only rows counted: the key stays
    keyless = TableSchema(wide.columns)
    assert following.kept_columns(keyless, set()).names == ["id"]  # no key: one column carries the rows
    assert following.kept_columns(keyless, {"b"}).names == ["b"]
    assert following.kept_columns(wide, {"a", "gone"}).names == ["id", "a"]  # a view of a dropped column fails itself


def test_a_rename_is_told_by_the_tables_places_when_the_engine_keeps_only_the_columns_read():
    # The table (id, amount, note, extra) is kept as (id, note): positions are the table's, not the copy's.
    kept = TableSchema((Column("id", INT, False), Column("note", TEXT)), ("id",))
    table = ["id", "amount", "note", "extra"]
    now = Recheck("public.orders", {"id": INT, "amount": NUM, "memo": TEXT, "extra": INT}, IDENTITY)
    renamed = following.ddl_effect("public.orders", kept, {"note"}, now, IDENTITY, None, table)
    assert isinstance(renamed, following.Rename) and renamed.mapping == {"note": "memo"}
    unnamed = following.ddl_effect("public.orders", kept, {"note"}, now, IDENTITY)  # positions of the copy: unknown
    assert isinstance(unnamed, following.Fail) and "column note of public.orders was dropped" in unnamed.error
    unread = Recheck("public.orders", {"id": INT, "note": TEXT, "extra": INT}, IDENTITY)  # amount dropped, unread
    assert following.ddl_effect("public.orders", kept, {"note"}, unread, IDENTITY, None, table) is None


def test_a_failure_the_catalog_shows_waits_for_the_streams_statement():
    """MySQL's binlog names the DDL: a change read off the catalog first waits until the stream has passed
    the server's position at that read (then the stream's statement names it, and a rename applies from
    it on), at most its patience."""
    from freshview.service.following import Fail, Refollow, Rename, awaits_statement

    fail = Fail("freshview: t no longer exists")
    assert awaits_statement(fail, None, settles_at=10, position=5, waited_s=0.0)
    assert awaits_statement(fail, None, settles_at=10, position=None, waited_s=1.0)
    assert not awaits_statement(fail, None, settles_at=10, position=10, waited_s=0.0)  # the stream passed it
    assert not awaits_statement(fail, None, settles_at=10, position=5, waited_s=31.0)  # patience spent
    assert not awaits_statement(fail, "RENAME TABLE t TO u", settles_at=10, position=5, waited_s=0.0)
    assert not awaits_statement(fail, None, settles_at=None, position=5, waited_s=0.0)  # PostgreSQL: no statements
    assert awaits_statement(Refollow("x"), None, settles_at=10, position=5, waited_s=0.0)
    assert awaits_statement(Rename("t", "u", {}, {}, "t was renamed"), None, settles_at=10, position=5, waited_s=0.0)
    assert not awaits_statement(None, None, settles_at=10, position=5, waited_s=0.0)


def test_a_change_to_a_row_the_engine_does_not_hold_says_how_to_fix_it():
    message = following.missing_row("public.t", {"id": 5, "k": "a"})
    assert message.startswith("public.t: no old row for key (id=5, k='a')")
    assert "REPLICA IDENTITY FULL" in message
