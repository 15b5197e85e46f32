"""Database names (SQL text, quoted or not) to qualified names, engine names and back, per the connector's default schema."""

from __future__ import annotations

import pytest

from freshview.connectors.postgres.identifiers import parse, quote
from freshview.errors import CatalogError
from freshview.service.names import Names, engine_name, qualified_from_engine, qualify


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
    assert qualify(text) == qualified
    assert qualify(qualified) == qualified  # idempotent: the qualified name is valid name text
    assert engine_name(qualified) == engine
    assert qualified_from_engine(engine) == qualified


@pytest.mark.parametrize("text", ["", "a.b.c", "bad name", "orders;drop", "orders AS o", '"a.b".c', "f()", '""',
                                  "x."])
def test_invalid_names_are_refused_with_the_fix(text):
    with pytest.raises(CatalogError, match="invalid table name .*schema.table"):
        qualify(text)


def test_parts_and_quoting():
    name = parse('"Sales"."Big Totals"')
    assert (name.schema, name.table) == ("Sales", "Big Totals")
    assert quote("ok_1") == "ok_1" and quote("Big") == '"Big"' and quote('a"b') == '"a""b"'


def test_mysql_names_default_to_the_dsn_database():
    names = Names("app", "mysql")
    assert names.qualify("orders") == "app.orders" and names.qualify("other.t") == "other.t"
    assert names.engine("app.orders") == "orders" and names.engine("public.orders") == "public.orders"
    assert names.qualified("orders") == "app.orders" and names.qualified("other.t") == "other.t"


def test_mysql_names_freshview_cannot_follow_are_refused():
    with pytest.raises(CatalogError, match="invalid table name"):
        Names("app", "mysql").qualify('"Mixed Case"')
