"""``use_existing_table``: whether a user's table can hold a view's result (``connectors.postgres.existing``,
``connectors.mysql.existing``), without a database."""

from __future__ import annotations

import pytest

from freshview.connectors.mysql import existing as mysql_existing
from freshview.connectors.mysql.sink import ResultShape as MySqlShape
from freshview.connectors.postgres.existing import Column, Table, Unique, lossless, refusal, spelled
from freshview.connectors.postgres.sink import ResultShape

TOTALS = ResultShape((("customer", "integer"), ("region", "text"), ("n", "bigint"), ("total", "numeric(14,2)")),
                     ("customer", "region"), False, True)


def table(**changes) -> Table:
    columns = {"customer": Column("bigint"), "region": Column("character varying"), "n": Column("bigint"),
               "total": Column("numeric"), "note": Column("text", not_null=True, has_default=True)}
    columns.update(changes.pop("columns", {}))
    for gone in changes.pop("without", ()):
        columns.pop(gone)
    uniques = changes.pop("uniques", [Unique(frozenset({"customer", "region"}), nulls_not_distinct=True)])
    return Table(columns, uniques, changes.pop("missing", ()))


@pytest.mark.parametrize("source,target,ok", [
    ("integer", "integer", True), ("integer", "bigint", True), ("bigint", "integer", False),
    ("smallint", "numeric", True), ("integer", "numeric(12,2)", True), ("integer", "numeric(10,2)", False),
    ("numeric(12,2)", "numeric", True), ("numeric", "numeric(12,2)", False), ("numeric(12,2)", "numeric(14,3)", True),
    ("numeric(12,2)", "numeric(12,3)", False), ("real", "double precision", True), ("double precision", "real", False),
    ("text", "character varying", True), ("text", "character varying(20)", False), ("text", "integer", False),
    ("integer[]", "bigint[]", True), ("integer[]", "integer", False), ("date", "timestamp without time zone", False),
    (spelled("timestamptz"), "timestamp with time zone", True), (spelled("numeric(12, 2)"), "numeric(12,2)", True),
])
def test_a_type_converts_without_loss_only_to_what_holds_every_value(source, target, ok):
    assert lossless(source, target) is ok


def test_a_compatible_table_is_accepted():
    assert refusal("public.t", TOTALS, table()) is None
    counted = ResultShape((("customer", "integer"), ("amount", "numeric")), ("customer", "amount"), True, True)
    ok = Table({"customer": Column("integer"), "amount": Column("numeric"), "_fv_count": Column("bigint")},
               [Unique(frozenset({"customer", "amount"}), nulls_not_distinct=True)])
    assert refusal("public.c", counted, ok) is None
    single = ResultShape((("n", "bigint"),), (), False, False)
    assert refusal("public.s", single, Table({"n": Column("numeric")})) is None  # one row: no key needed


def test_every_difference_is_named():
    bad = table(columns={"total": Column("integer"), "extra": Column("text", not_null=True)}, without=("n",),
                uniques=[Unique(frozenset({"customer"}), primary=True)], missing=("UPDATE", "DELETE"))
    text = refusal("public.t", TOTALS, bad)
    assert text == ("freshview: the table public.t cannot hold the view's result (use_existing_table): "
                    "it has no column n (bigint); "
                    "its column total is integer, which the view's numeric(14,2) does not convert to without loss; "
                    "its column extra is NOT NULL without a default, and the view does not fill it; "
                    "it has no primary key or unique index on exactly (customer, region), the view's key; "
                    "the service may not UPDATE, DELETE it (GRANT SELECT, INSERT, UPDATE, DELETE ON public.t TO "
                    "the service's role)")


def test_a_key_that_can_be_null_needs_nulls_not_distinct():
    text = refusal("public.t", TOTALS, table(uniques=[Unique(frozenset({"customer", "region"}))]))
    assert text.endswith("the view's key (customer, region) can be NULL: its unique index needs NULLS NOT DISTINCT")
    counted = ResultShape((("a", "integer"),), ("a",), True, False)
    assert "it has no column _fv_count (bigint)" in refusal("public.c", counted, Table(
        {"a": Column("integer")}, [Unique(frozenset({"a"}))]))


# ---------------------------------------------------------------------------------------------- MySQL/MariaDB
@pytest.mark.parametrize("source,target,ok", [
    ("int", "int(11)", True), ("int", "bigint(20)", True), ("bigint", "int(11)", False), ("tinyint(1)", "tinyint(4)", True),
    ("int", "int(10) unsigned", False), ("int", "decimal(12,2)", True), ("int", "decimal(10,2)", False),
    ("decimal(12,2)", "decimal(14,3)", True), ("decimal(12,2)", "decimal(12,3)", False), ("float", "double", True),
    ("double", "float", False), ("longtext", "longtext", True), ("longtext", "varchar(255)", False),
    ("json", "longtext", True), ("char(36)", "varchar(40)", True), ("char(36)", "varchar(20)", False),
    ("longtext", mysql_existing.normalized("longtext", "latin1"), False), ("datetime(6)", "datetime", False),
])
def test_a_mysql_type_converts_without_loss_only_to_what_holds_every_value(source, target, ok):
    assert mysql_existing.lossless(source, target) is ok


def test_a_mysql_table_needs_fv_key_under_a_unique_key_and_no_unique_key_without_it():
    shape = MySqlShape((("customer", "int"), ("n", "bigint")), ("customer",), False)
    columns = {"_fv_key": Column("binary(16)", not_null=True), "customer": Column("bigint"), "n": Column("bigint")}
    assert mysql_existing.refusal("app.t", shape, Table(columns, [Unique(frozenset({"_fv_key"}), primary=True)])) is None
    partitioned = [Unique(frozenset({"_fv_key", "customer"}), primary=True)]  # (with a column of the key: allowed)
    assert mysql_existing.refusal("app.t", shape, Table(columns, partitioned)) is None
    text = mysql_existing.refusal("app.t", shape, Table(columns, [Unique(frozenset({"_fv_key", "n"}), primary=True),
                                                                 Unique(frozenset({"n"}), name="by_n")]))
    assert text == ("freshview: the table app.t cannot hold the view's result (use_existing_table): "
                    "it has no primary key or unique index on _fv_key (alone, or with columns of the view's key: "
                    "customer), the key freshview writes by; its unique index by_n on (n) lacks _fv_key: freshview "
                    "writes rows by _fv_key, and a row equal on it would be written over")
    single = MySqlShape((("n", "bigint"),), (), False)  # one row: no key needed
    assert mysql_existing.refusal("app.s", single, Table({"n": Column("decimal(30,0)")})) is None
