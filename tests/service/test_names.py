"""Database names (SQL text, quoted or not) to qualified names, engine names and back, per the connector's default schema."""

from __future__ import annotations

import pytest

from freshview.connectors.mysql.catalog import MySqlNames
from freshview.connectors.postgres.identifiers import PostgresNames, parse, quote
from freshview.errors import CatalogError
from freshview.service.names import Names

POSTGRES = Names("public", PostgresNames())
MYSQL = Names("app", MySqlNames())


@pytest.mark.parametrize("text, qualified, engine", [
    ("orders", "public.orders", "orders"),
    ("public.orders", "public.orders", "orders"),
    ("  Public.ORDERS ", "public.orders", "orders"),  # unquoted parts fold to lower case
    ("sales.orders", "sales.orders", "sales.orders"),
    ('"Sales"."Big Totals"', '"Sales"."Big Totals"', "Sales.Big Totals"),
    ('"Orders"', 'public."Orders"', "Orders"),
    ('public."order"', "public.order", "order"),  # quoted but plain: needs no quotes
    ('"a""b"', 'public."a""b"', 'a"b'),
    ('s."x$1"', "s.x$1", "s.x$1"),
])
def test_names_round_trip(text, qualified, engine):
    assert POSTGRES.qualify(text) == qualified
    assert POSTGRES.qualify(qualified) == qualified  # idempotent: the qualified name is valid name text
    assert POSTGRES.engine(qualified) == engine
    assert POSTGRES.qualified(engine) == qualified


@pytest.mark.parametrize("text", ["", "a.b.c", "bad name", "orders;drop", "orders AS o", '"a.b".c', "f()", '""',
                                  "x."])
def test_invalid_names_are_refused_with_the_fix(text):
    with pytest.raises(CatalogError, match="invalid table name .*schema.table"):
        POSTGRES.qualify(text)


def test_parts_and_quoting():
    name = parse('"Sales"."Big Totals"')
    assert (name.schema, name.table) == ("Sales", "Big Totals")
    assert quote("ok_1") == "ok_1" and quote("Big") == '"Big"' and quote('a"b') == '"a""b"'


@pytest.mark.parametrize("text, qualified, engine", [
    ("orders", "app.orders", "orders"),
    ("app.orders", "app.orders", "orders"),
    (" Orders ", "app.Orders", "Orders"),  # case kept: MySQL on Linux compares table names exactly
    ("other.t", "other.t", "other.t"),
    ("`Big Totals`", "app.`Big Totals`", "Big Totals"),
    ("`My Db`.`a``b`", "`My Db`.`a``b`", "My Db.a`b"),
    ("`app`.`plain`", "app.plain", "plain"),  # quoted but plain: needs no backticks
    ("`123`", "app.`123`", "123"),  # all digits: MySQL needs the backticks
    ("app.t$1", "app.t$1", "t$1"),
    ("app.café", "app.café", "café"),
])
def test_mysql_names_round_trip(text, qualified, engine):
    assert MYSQL.qualify(text) == qualified
    assert MYSQL.qualify(qualified) == qualified
    assert MYSQL.engine(qualified) == engine
    assert MYSQL.qualified(engine) == qualified


@pytest.mark.parametrize("text", ["", "a.b.c", "bad name", "orders;drop", "orders AS o", '"Mixed Case"', "f()",
                                  "``", "x."])
def test_invalid_mysql_names_are_refused_with_the_fix(text):
    with pytest.raises(CatalogError, match="invalid table name .*database.table"):
        MYSQL.qualify(text)
