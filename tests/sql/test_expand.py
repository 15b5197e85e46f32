"""Relations read through their definitions (``sql.expand``): database views, inheritance parents."""

from __future__ import annotations

import pytest

from freshview.errors import UnsupportedSqlError
from freshview.schema import schema_from_ddl
from freshview.sql import build_plan, compile_view

TABLES = {
    "orders": schema_from_ddl("id INT, customer INT, amount NUMERIC(10,2), status TEXT"),
    "customers": schema_from_ddl("id INT, region TEXT"),
    "parent": schema_from_ddl("id INT, v TEXT"),
    "child": schema_from_ddl("id INT, v TEXT"),
}
DEFINITIONS = {
    "open_orders": "SELECT o.id, o.customer, o.amount FROM public.orders o WHERE (o.status = ANY (ARRAY['open', 'new']))",
    "big_open": " SELECT open_orders.id, open_orders.amount\n   FROM public.open_orders\n  WHERE open_orders.amount > 10;",
    "parent": "SELECT id, v FROM ONLY public.parent UNION ALL SELECT id, v FROM ONLY public.child",
    "sampled": "SELECT id FROM public.orders TABLESAMPLE SYSTEM (5)",
}


class Tables:
    default_schema = "public"

    def relation_columns(self, name):
        if name in TABLES:
            return tuple((c.name, c.type) for c in TABLES[name].columns), False
        return None


class Database(Tables):
    """A catalog that reads some relations through their definitions (``Source.expansion``)."""

    def relation_expansion(self, name):
        text = DEFINITIONS.get(name)
        return text.rstrip().rstrip(";") if text else None


@pytest.mark.parametrize("sql", [
    "SELECT customer, SUM(amount) AS total FROM open_orders GROUP BY customer",
    "SELECT b.id, c.region FROM big_open b JOIN orders o ON o.id = b.id JOIN customers c ON c.id = o.customer",
    "SELECT x FROM public.open_orders AS oo (x, y) WHERE y > 3",
    "SELECT id FROM customers c WHERE EXISTS (SELECT 1 FROM open_orders o WHERE o.customer = c.id)",
    "SELECT v, COUNT(*) AS n FROM parent GROUP BY v",
    "SELECT id FROM ONLY parent",
    "WITH open_orders AS (SELECT id FROM customers) SELECT id FROM open_orders",
])
def test_the_engine_text_plans_as_the_view_did(sql):
    plan, engine_sql = compile_view(sql, Database())
    assert build_plan(engine_sql, Tables()) == plan  # the engine knows tables only, and reads the same
    if "ONLY" in sql or sql.startswith("WITH"):
        assert engine_sql == sql  # ONLY and CTEs are not expanded
    else:
        assert engine_sql != sql


def test_the_text_outside_expanded_items_is_kept():
    _, engine_sql = compile_view("SELECT id  FROM  open_orders  WHERE id > 1", Database())
    assert engine_sql == ("SELECT id  FROM  (SELECT o.id, o.customer, o.amount FROM public.orders o WHERE "
                          "(o.status = ANY (ARRAY['open', 'new']))) AS open_orders  WHERE id > 1")


def test_a_refusal_inside_a_definition_names_the_relation_and_points_at_it():
    with pytest.raises(UnsupportedSqlError) as info:
        build_plan("SELECT id\nFROM sampled", Database())
    text = str(info.value)
    assert "sampled is read through its definition, where TABLESAMPLE is not supported" in text
    assert info.value.location.line == 2 and info.value.location.column == 6
