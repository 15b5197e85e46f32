"""Row changes kept as payloads and decoded a column at a time must give what the row-by-row path gives."""

from __future__ import annotations

import collections
import random
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from freshview.connectors.postgres import changes as changes_module
from freshview.connectors.postgres import columnar
from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.changes import ChangeError, RawChanges, TransactionAssembler, to_deltas
from freshview.connectors.postgres.types import to_arrow
from freshview.schema import SqlType, schema_from_ddl
from tests.support import pgoutput as w

REL = p.Relation(7, "public", "t", "d", (p.Column("id", 23, -1, True), p.Column("v", 1700, -1, False),
                                          p.Column("note", 25, -1, False), p.Column("extra", 25, -1, False)))
SCHEMA = schema_from_ddl("id INT, v NUMERIC(10,2), note TEXT", ["id"])  # 'extra' is not followed
FULL = p.Relation(8, "public", "e", "f", (p.Column("kind", 25, -1, False), p.Column("qty", 23, -1, False)))
FULL_SCHEMA = schema_from_ddl("kind TEXT, qty INT", [])
SCHEMAS = {"public.t": SCHEMA, "public.e": FULL_SCHEMA}


@pytest.fixture(autouse=True)
def columnar_always(monkeypatch):
    """Small batches normally take the row path (cheaper there); here every batch goes column-wise."""
    monkeypatch.setattr(changes_module, "COLUMNAR_MIN_CHANGES", 0)


def consolidated(table: pa.Table) -> list[tuple]:
    """A delta as a multiset: equal rows summed, zeros dropped (what the engine makes of it)."""
    total: collections.Counter = collections.Counter()
    for row in table.to_pylist():
        weight = row.pop("_weight")
        total[tuple(row.values())] += weight
    return sorted(((k, v) for k, v in total.items() if v), key=repr)


def stream(*transactions: list[bytes], relations=(REL, FULL)) -> list[bytes]:
    out = [w.relation(r) for r in relations]
    for i, body in enumerate(transactions):
        out += [w.begin(i + 1)] + body + [w.commit(100 * i, 100 * i + 10)]
    return out


def assemble(payloads: list[bytes], raw: bool) -> list:
    """Transactions from payloads: kept raw (feed_payload) or decoded message by message (feed)."""
    decoder, asm, txns = p.Decoder(), TransactionAssembler(), []
    for payload in payloads:
        txn = asm.feed_payload(payload, decoder) if raw else asm.feed(decoder.decode(payload))
        if txn is not None:
            txns.append(txn)
    return txns


class Engine:
    """The engine's copy of public.t (by id), for old rows the stream does not carry; counts lookups."""

    def __init__(self, rows: dict[int, tuple]) -> None:
        self.rows = rows
        self.asked: list[list[int]] = []

    def __call__(self, table: str, keys: pa.Table) -> pa.Table:
        if table != "public.t":
            return FULL_SCHEMA.arrow().empty_table()
        ids = keys.column("id").to_pylist()
        self.asked.append(sorted(ids))
        found = [self.rows[i] for i in ids if i in self.rows]
        return pa.table({"id": pa.array([r[0] for r in found], pa.int32()),
                         "v": pa.array([r[1] for r in found], pa.decimal128(10, 2)),
                         "note": pa.array([r[2] for r in found], pa.string())})


def both_paths(payloads: list[bytes], engine: Engine) -> tuple[dict, dict]:
    fast = to_deltas(assemble(payloads, raw=True), SCHEMAS, engine)
    slow = to_deltas(assemble(payloads, raw=False), SCHEMAS, Engine(engine.rows))
    assert fast.keys() == slow.keys()
    return ({t: consolidated(d) for t, d in fast.items()}, {t: consolidated(d) for t, d in slow.items()})


def test_the_encoder_writes_what_the_decoder_reads():
    decoder = p.Decoder()
    assert decoder.decode(w.relation(REL)) == REL
    assert decoder.decode(w.update(REL, ["2", "1.5", None, p.UNCHANGED_TOAST], ["1", None, None, None], True)) == \
        p.Update(REL, ["2", "1.5", None, p.UNCHANGED_TOAST], ["1", None, None, None], True)
    assert decoder.decode(w.delete(REL, ["1", "2", "é", ""], key_only=False)) == \
        p.Delete(REL, ["1", "2", "é", ""], False)


def test_parse_reads_what_the_decoder_reads_message_by_message():
    rng = random.Random(4)
    values = [None, "", "a", "é\t\\\"x", "12.50", p.UNCHANGED_TOAST, "long " * 50]
    row = lambda: [str(rng.randint(1, 99))] + [rng.choice(values) for _ in range(3)]  # noqa: E731
    payloads, starts = [], []
    for i in range(300):
        streamed = rng.random() < 0.3
        xid = 77 if streamed else None
        pick = rng.random()
        if pick < 0.3:
            payloads.append(w.insert(REL, row(), xid))
        elif pick < 0.5:
            payloads.append(w.update(REL, row(), xid=xid))
        elif pick < 0.7:
            payloads.append(w.update(REL, row(), row(), key_only=rng.random() < 0.5, xid=xid))
        else:
            payloads.append(w.delete(REL, row(), key_only=rng.random() < 0.5, xid=xid))
        starts.append(5 if streamed else 1)
    parsed = columnar.parse([memoryview(x) for x in payloads], starts, 4)
    messages = [p.row_change(x, s + 4, REL) for x, s in zip(payloads, starts)]

    def texts(tuples: columnar.Tuples) -> list[list]:
        cols = [c.to_pylist() for c in tuples.columns]
        return [[p.UNCHANGED_TOAST if tuples.toast[r, c] else cols[c][r] for c in range(4)]
                for r in range(len(tuples.toast))]

    assert texts(parsed.new) == [m.new for m in messages if not isinstance(m, p.Delete)]
    assert texts(parsed.old) == [m.old for m in messages if getattr(m, "old", None) is not None]
    assert [chr(k) for k in parsed.kind] == [type(m).__name__[0] for m in messages]
    assert [m.old_is_key_only for m in messages if getattr(m, "old", None) is not None] == \
        [k == ord("K") for k in parsed.old_kind[parsed.has_old]]


def test_parse_refuses_a_malformed_payload():
    good = w.insert(REL, ["1", "2", "x", None])
    assert columnar.parse([good], [1], 4).new.columns[2].to_pylist() == ["x"]
    binary = good.replace(b"t\x00\x00\x00\x01x", b"b\x00\x00\x00\x01x")
    for bad, ncols in ((binary, 4), (good, 3), (good[:-4], 4), (b"X" + good[1:], 4)):
        with pytest.raises(p.ProtocolError):
            columnar.parse([bad], [1], ncols)


def random_history(rng: random.Random, engine_rows: dict, txns: int, per_txn: int, moves: bool = True):
    """Random changes to public.t consistent with a table that starts as ``engine_rows``."""
    live = dict(engine_rows)
    next_id = max(live) + 1
    body_all = []
    for _ in range(txns):
        body = []
        for _ in range(per_txn):
            pick = rng.random()
            note = rng.choice([None, "a", "b", ""])
            value = f"{rng.randint(-500, 500) / 4:.2f}"
            if pick < 0.3 or not live:
                live[next_id] = (next_id, Decimal(value), note)
                body.append(w.insert(REL, [str(next_id), value, note, "x"]))
                next_id += 1
            elif pick < 0.6:
                key = rng.choice(list(live))
                live[key] = (key, Decimal(value), note)
                body.append(w.update(REL, [str(key), value, note, "y"]))
            elif pick < 0.75 and moves:
                key = rng.choice(list(live))
                live.pop(key)
                live[next_id] = (next_id, Decimal(value), note)
                body.append(w.update(REL, [str(next_id), value, note, "z"], [str(key), None, None, None], True))
                next_id += 1
            else:
                key = rng.choice(list(live))
                live.pop(key)
                body.append(w.delete(REL, [str(key), None, None, None]))
        body_all.append(body)
    return body_all


@pytest.mark.parametrize("seed", range(6))
def test_random_batches_under_default_identity_match_the_row_path(seed):
    rng = random.Random(seed)
    engine = Engine({i: (i, Decimal(i), rng.choice([None, "n"])) for i in range(1, 30)})
    payloads = stream(*random_history(rng, engine.rows, txns=rng.randint(1, 6), per_txn=rng.randint(1, 25)))
    fast, slow = both_paths(payloads, engine)
    assert fast == slow
    assert len(engine.asked) <= 1  # one lookup at most, for the keys whose old row was not sent


def test_distinct_keys_and_repeated_keys_both_take_one_lookup():
    engine = Engine({1: (1, Decimal("1.00"), "a"), 2: (2, Decimal("2.00"), None), 3: (3, Decimal("3.00"), "c")})
    payloads = stream([w.update(REL, ["1", "1.50", "a", "x"]),
                       w.insert(REL, ["8", "1", "n", "x"]), w.update(REL, ["8", "2", "n", "x"])],
                      [w.update(REL, ["9", "2.00", None, "x"], ["2", None, None, None], True),
                       w.update(REL, ["1", "1.75", "q", "x"]),
                       w.delete(REL, ["3", None, None, None]), w.insert(REL, ["3", "30", "again", "x"]),
                       w.delete(REL, ["8", None, None, None])])
    fast, slow = both_paths(payloads, engine)
    assert fast == slow == {"public.t": sorted([
        ((1, Decimal("1.00"), "a"), -1), ((1, Decimal("1.75"), "q"), 1), ((2, Decimal("2.00"), None), -1),
        ((9, Decimal("2.00"), None), 1), ((3, Decimal("3.00"), "c"), -1), ((3, Decimal("30.00"), "again"), 1)],
        key=repr)}
    assert engine.asked == [[1, 2, 3]]  # 8 was created in the batch: never asked for


def test_full_identity_needs_no_lookup_and_keeps_duplicates():
    engine = Engine({1: (1, Decimal(1), None)})
    payloads = stream([w.insert(FULL, ["click", "1"]), w.insert(FULL, ["click", "1"]),
                       w.update(FULL, ["click", "2"], ["click", "1"], key_only=False),
                       w.delete(FULL, ["view", None], key_only=False)])
    fast, slow = both_paths(payloads, engine)
    assert fast == slow == {"public.e": sorted([(("click", 1), 1), (("click", 2), 1), (("view", None), -1)],
                                               key=repr)}
    assert engine.asked == []


def test_unchanged_toast_values_and_a_missing_old_row_go_the_row_path():
    engine = Engine({1: (1, Decimal("1.00"), "big")})
    payloads = stream([w.update(REL, ["1", "3.00", p.UNCHANGED_TOAST, "x"])])
    fast, slow = both_paths(payloads, engine)
    assert fast == slow == {"public.t": [((1, Decimal("1.00"), "big"), -1), ((1, Decimal("3.00"), "big"), 1)]}
    with pytest.raises(ChangeError, match="no old row for key"):
        to_deltas(assemble(stream([w.delete(REL, ["42", None, None, None])]), raw=True), SCHEMAS, engine)


def test_streamed_transactions_truncate_and_a_new_table_definition():
    engine = Engine({1: (1, Decimal("1.00"), "a")})
    wide = p.Relation(7, "public", "t", "d", REL.columns + (p.Column("more", 23, -1, False),))
    payloads = [w.relation(REL), w.stream_start(5), w.insert(REL, ["10", "1", "s", "x"], xid=5),
                w.insert(REL, ["11", "1", "gone", "x"], xid=6), w.stream_stop(), w.stream_abort(5, 6),
                w.stream_start(5, False), w.update(REL, ["1", "9", "a", "x"], xid=5), w.stream_stop(),
                w.stream_commit(5, 50, 60),
                w.begin(9), w.insert(REL, ["12", "1", "t", "x"]), w.truncate([REL]),
                w.insert(REL, ["13", "2", "u", "x"]),
                w.relation(wide), w.insert(wide, ["14", "3", "w", "x", "7"]), w.commit(70, 80)]
    txns = assemble(payloads, raw=True)
    assert [t.size for t in txns] == [2, 2] and txns[1].truncated == ["public.t"]
    assert isinstance(txns[0].changes["public.t"], RawChanges)
    fast = consolidated(to_deltas(txns[0], SCHEMAS, engine)["public.t"])
    assert fast == sorted([((10, Decimal("1.00"), "s"), 1), ((1, Decimal("1.00"), "a"), -1),
                           ((1, Decimal("9.00"), "a"), 1)], key=repr)
    both = consolidated(to_deltas(txns[1], SCHEMAS, engine)["public.t"])  # two definitions: the row path
    assert both == sorted([((13, Decimal("2.00"), "u"), 1), ((14, Decimal("3.00"), "w"), 1)], key=repr)


def test_small_batches_take_the_row_path(monkeypatch):
    engine = Engine({1: (1, Decimal("1.00"), "a")})
    payloads = stream([w.insert(REL, ["8", "1", "n", "x"]), w.update(REL, ["8", "2", "n", "x"])])
    column_wise = to_deltas(assemble(payloads, raw=True), SCHEMAS, engine)["public.t"]
    assert column_wise.num_rows == 1  # netted per key: only the row after
    monkeypatch.setattr(changes_module, "COLUMNAR_MIN_CHANGES", 3)
    row_wise = to_deltas(assemble(payloads, raw=True), SCHEMAS, engine)["public.t"]
    assert row_wise.num_rows == 3  # in order: +first, -first, +second
    assert consolidated(row_wise) == consolidated(column_wise)


@pytest.mark.parametrize("t, values", [
    (SqlType("int4"), ["1", "-2147483648", None]),
    (SqlType("int8"), ["9223372036854775807", None]),
    (SqlType("float8"), ["1.5", "-0", "1e+300", "Infinity", "-Infinity", "0.1", None]),
    (SqlType("float4"), ["0.1", "3.4028235e+38", None]),
    (SqlType.numeric(12, 2), ["1.50", "-0.01", "1234567890.12", None]),
    (SqlType.numeric(None, None), ["1.5", "0.000001", "-12345678901234567890.123456", None]),
    (SqlType.numeric(None, None), ["12345678901234567890123456789012345.5"]),  # Arrow's cast would wrap around
    (SqlType.numeric(38, 38), ["0.12345678901234567890123456789012345678", "-0." + "0" * 37 + "1", None]),
    (SqlType("bool"), ["t", "f", None]),
    (SqlType("text"), ["", "é", None]),
    (SqlType("date"), ["2024-02-29", "0044-03-15 BC", None]),
    (SqlType("timestamp"), ["2024-01-01 10:00:00.5", "2024-01-01 10:00:00", None]),
    (SqlType("timestamptz"), ["2024-01-01 10:00:00.25+02", "1900-01-01 00:00:00+00:09:21",
                              "2024-06-01 00:00:00-03:30"]),
])
def test_text_columns_parse_as_value_by_value(t, values):
    column = pa.array(values, pa.string())
    try:
        expected = to_arrow(values, t)
    except Exception as exc:  # the same refusal either way
        with pytest.raises(type(exc)):
            to_arrow(column, t)
        return
    got = to_arrow(column, t)
    assert got.type == expected.type and got.to_pylist() == expected.to_pylist()
    assert pc.all(pc.equal(got, expected)).as_py() in (True, None)
