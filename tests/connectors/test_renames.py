"""A renamed table's changes handed under the names it was followed by (``connectors.postgres.renames``)."""

from __future__ import annotations

import collections
from decimal import Decimal

import pytest

from freshview.connectors.base import Renamed
from freshview.connectors.postgres import changes as changes_module
from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.changes import TransactionAssembler, to_deltas
from freshview.connectors.postgres.renames import as_followed, followed_columns, followed_definition
from freshview.schema import schema_from_ddl
from tests.support import pgoutput as w

COLUMNS = (p.Column("id", 23, -1, True), p.Column("v", 1700, -1, False))
BEFORE = p.Relation(7, "public", "t", "d", COLUMNS)
# renamed to sales.t2, its column v to "Value" (the same OID, the same places)
AFTER = p.Relation(7, "sales", "t2", "d", (COLUMNS[0], p.Column("Value", 1700, -1, False)))
SCHEMAS = {"public.t": schema_from_ddl("id INT, v NUMERIC(10,2)", ["id"])}
RENAMED = {"public.t": Renamed("sales.t2", {"v": "Value"})}


def net(table) -> dict:
    total: collections.Counter = collections.Counter()
    for row in table.to_pylist():
        weight = row.pop("_weight")
        total[tuple(row.values())] += weight
    return {k: v for k, v in total.items() if v}


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("columnar", [True, False])
def test_a_transaction_across_a_rename_is_one_tables_change_under_the_followed_names(raw, columnar, monkeypatch):
    if columnar:
        monkeypatch.setattr(changes_module, "COLUMNAR_MIN_CHANGES", 0)
    payloads = [w.relation(BEFORE), w.begin(1), w.insert(BEFORE, ["1", "1.50"]), w.insert(BEFORE, ["3", "9"]),
                w.relation(AFTER), w.insert(AFTER, ["2", "2.50"]),  # renamed inside the transaction
                w.update(AFTER, ["1", "3.00"], old=["1", "1.50"]), w.commit(0, 10)]
    decoder, asm = p.Decoder(), TransactionAssembler()
    txn = None
    for payload in payloads:
        txn = asm.feed_payload(payload, decoder) if raw else asm.feed(decoder.decode(payload))
    assert set(txn.changes) == {"sales.t2", "public.t"}  # the names as sent
    followed = as_followed(txn, {7: "public.t"})
    assert set(followed.changes) == {"public.t"} and set(followed.relations) == {"public.t"}
    assert as_followed(txn, {8: "public.x"}) is txn  # nothing followed by another name
    deltas = to_deltas(followed_columns(followed, RENAMED), SCHEMAS, lambda t, k: SCHEMAS[t].arrow().empty_table())
    assert net(deltas["public.t"]) == {(1, Decimal("3.00")): 1, (2, Decimal("2.50")): 1, (3, Decimal("9.00")): 1}


def test_definitions_are_told_under_the_followed_column_names():
    assert followed_definition({"id": 1, "Value": 2}, RENAMED["public.t"]) == {"id": 1, "v": 2}
    assert followed_definition({"id": 1}, None) == {"id": 1}
