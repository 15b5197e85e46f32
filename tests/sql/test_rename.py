"""A view's text rewritten after a table it reads, or columns of it, were renamed (``sql.rename``): the new text
plans, over the renamed table, exactly what the old text planned over the old one."""

from __future__ import annotations

import re

import pytest

from freshview.errors import SqlError
from freshview.plan.explain import render
from freshview.schema import schema_from_ddl
from freshview.sql import build_plan
from freshview.sql.rename import renamed

BEFORE = {
    "orders": schema_from_ddl("o_id INT, o_customer INT, amount NUMERIC(10,2), note TEXT"),
    "customers": schema_from_ddl("c_id INT, c_region TEXT, amount INT"),
}
# orders renamed to sales.ledger, its amount to total_due and note to "Memo"
AFTER = {
    "sales.ledger": schema_from_ddl('o_id INT, o_customer INT, total_due NUMERIC(10,2), "Memo" TEXT'),
    "customers": BEFORE["customers"],
}
COLUMNS = {"amount": "total_due", "note": "Memo"}


class Catalog:
    def __init__(self, sources):
        self.sources = sources

    def relation_columns(self, name):
        found = self.sources.get(name)
        return None if found is None else (tuple((c.name, c.type) for c in found.columns), False)


def columns_of(name):
    found = BEFORE.get(name)
    return None if found is None else found.names


def normalized(text: str) -> str:
    """A plan's rendering with the new names put back: equal renderings, equal plans."""
    for new, old in (("sales.ledger", "orders"), ("total_due", "amount"), ("Memo", "note")):
        text = text.replace(new, old)
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("sql", [
    "SELECT o_customer, SUM(amount) AS total, COUNT(note) FROM orders GROUP BY o_customer",
    "SELECT amount, note FROM orders WHERE amount > 10",
    "SELECT o.o_customer, c.c_region, SUM(o.amount) AS s FROM orders o JOIN customers c ON o.o_customer = c.c_id "
    "GROUP BY 1, 2",
    "SELECT orders.amount FROM orders WHERE orders.amount > (SELECT AVG(amount) FROM orders o2 "
    "WHERE o2.o_customer = orders.o_customer)",
    "SELECT c_region, c.amount FROM customers c WHERE EXISTS (SELECT 1 FROM orders WHERE o_customer = c.c_id AND "
    "amount > c.amount)",
    "WITH big AS (SELECT o_customer, amount FROM orders WHERE amount > 5) SELECT o_customer, MAX(amount) FROM big "
    "GROUP BY o_customer",
    "SELECT note FROM orders UNION ALL SELECT c_region FROM customers",
    "SELECT DISTINCT note, amount * 2 AS twice FROM public.orders",
    "SELECT o_id, SUM(amount) OVER (PARTITION BY o_customer) AS running FROM orders",
])
def test_the_rewritten_view_plans_what_the_old_one_did(sql):
    new = renamed(sql, "postgres", "public", "orders", ("sales", "ledger"), COLUMNS, columns_of)
    before, after = build_plan(sql, Catalog(BEFORE)), build_plan(new, Catalog(AFTER))
    assert after.columns == before.columns, new  # the view's columns keep their names
    assert normalized(render(after)) == normalized(render(before)), new


def test_only_the_names_that_change_are_replaced():
    sql = "SELECT o_customer,\n       SUM(amount) AS total  -- per customer\nFROM orders GROUP BY o_customer"
    assert renamed(sql, "postgres", "public", "orders", None, {"amount": "paid"}, columns_of) == \
        'SELECT o_customer,\n       SUM("paid") AS total  -- per customer\nFROM orders GROUP BY o_customer'
    assert renamed(sql, "postgres", "public", "orders", (None, "orders_v2"), {}, columns_of) == \
        "SELECT o_customer,\n       SUM(amount) AS total  -- per customer\nFROM orders_v2 AS orders GROUP BY o_customer"
    assert renamed("SELECT amount FROM customers", "postgres", "public", "orders", None, {"amount": "x"},
                   columns_of) == "SELECT amount FROM customers"  # another table's column of the same name


def test_tables_of_other_schemas_and_the_default_one_together():
    columns = {"sales.ledger": ["o_id", "o_customer", "amount"], "customers": ["c_id", "c_region"]}
    sql = "SELECT l.o_id, c_region FROM sales.ledger l JOIN customers ON l.o_customer = c_id WHERE amount > 5"
    assert renamed(sql, "postgres", "public", "sales.ledger", None, {"o_id": "id", "amount": "due"},
                   columns.get) == ('SELECT l."id" AS o_id, c_region FROM sales.ledger l JOIN customers ON '
                                    'l.o_customer = c_id WHERE "due" > 5')


def test_mysql_text_is_rewritten_with_its_quotes():
    sql = "SELECT a, COUNT(*) AS n FROM f_rename GROUP BY a"
    assert renamed(sql, "mysql", "app", "f_rename", (None, "f_renamed"), {"a": "aa"}, lambda n: ["id", "a", "b"]) == \
        "SELECT `aa` AS a, COUNT(*) AS n FROM f_renamed AS f_rename GROUP BY `aa`"


@pytest.mark.parametrize("sql, why", [
    ("SELECT * FROM orders", "selects *"),
    ("SELECT o.* FROM orders o", "selects *"),
    ("SELECT c_region FROM customers JOIN orders USING (amount)", "USING"),
])
def test_what_cannot_keep_its_columns_is_refused(sql, why):
    with pytest.raises(SqlError, match=why):
        renamed(sql, "postgres", "public", "orders", None, COLUMNS, columns_of)
    assert renamed(sql, "postgres", "public", "orders", (None, "o2"), {}, columns_of)  # the table alone: fine
