"""Source relations as PostgreSQL describes them: what can be followed, and how.

Each relation kind is handled on purpose:

* a table (``r``) is followed as itself, and only itself (``ONLY``: its
  snapshot and its publication membership leave inheritance children out).
  Freshview must see every change's old row: the table has a primary key
  (freshview keeps its own copy and looks old rows up by key, since under
  REPLICA IDENTITY DEFAULT an UPDATE sends only the new row), a replica
  identity index (keyed by it), or REPLICA IDENTITY FULL.  A table with none
  of these, or with REPLICA IDENTITY NOTHING, is refused with the statement
  that fixes it: adding it to the publication would make the application's
  UPDATE and DELETE on it fail.
* an inheritance parent read without ``ONLY`` reads its descendants too: it is
  read through ``expansion``, the union of each table ``ONLY``, and each child
  is followed (and checked) as a table of its own.
* a partitioned table (``p``) is followed at its root: the publication
  publishes through the root (``publish_via_partition_root``), so the stream
  names the root.  It needs a primary key (then every partition, present and
  future, has one: REPLICA IDENTITY FULL on the root does not reach its
  partitions), and every present partition a usable replica identity.  A
  partition is not followed by itself (its changes are published as its
  root's once the root is in the publication).
* a plain view (``v``) is read through its definition (``expansion``).
* a materialized view (``m``), a foreign table (``f``), a sequence: refused,
  they have no change stream.

``recheck`` finds followed tables again by OID: renamed (another name), gone,
a key, replica identity, set of partitions or of inheritance children that
changed (``identity``; a view over an inheritance parent is created again
then, its definition read anew).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import psycopg

from freshview.connectors.base import Recheck
from freshview.connectors.postgres.identifiers import qualified as spell
from freshview.connectors.postgres.types import UnsupportedTypeError, sql_type
from freshview.errors import CatalogError, SchemaError
from freshview.schema import Column, SqlType, TableSchema

_RELATION = """
SELECT c.oid, c.relkind, c.relreplident, c.relispartition, n.nspname, c.relname,
       EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = {}
"""
_COLUMNS = """
SELECT a.attname, a.atttypid, a.atttypmod, a.attnotnull, format_type(a.atttypid, a.atttypmod), a.attnum
FROM pg_attribute a
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
# the primary key, or the replica identity index (indisreplident)
_KEY = """
SELECT a.attname
FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = %s AND i.{} AND i.indisvalid
ORDER BY array_position(i.indkey, a.attnum)
"""
_LEAVES = """
SELECT t.relid, c.relkind, c.relreplident, n.nspname, c.relname,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = t.relid AND i.indisprimary)
FROM pg_partition_tree(%s) t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.isleaf ORDER BY t.relid
"""
_PARENT = """
SELECT n.nspname, c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE i.inhrelid = %s
"""
_DESCENDANTS = """
WITH RECURSIVE d(oid) AS (SELECT inhrelid FROM pg_inherits WHERE inhparent = %s
                          UNION SELECT i.inhrelid FROM pg_inherits i JOIN d ON i.inhparent = d.oid)
SELECT c.oid, c.relkind, format('%%I.%%I', n.nspname, c.relname), n.nspname, c.relname
FROM d JOIN pg_class c ON c.oid = d.oid JOIN pg_namespace n ON n.oid = c.relnamespace ORDER BY c.oid
"""
# Everything ``recheck`` reads of a relation, as one digest per OID: one query tells which followed tables
# changed since the last look (the periodic check costs one query while nothing changes).
_SIGNATURE = """
SELECT c.oid, md5(concat_ws('|', n.nspname, c.relname, c.relkind, c.relreplident, c.relispartition,
  (SELECT string_agg(concat_ws(':', a.attname, a.atttypid, a.atttypmod,
                               (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e
                                WHERE e.enumtypid = a.atttypid)), ',' ORDER BY a.attnum)
   FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
  (SELECT string_agg(concat_ws(':', i.indexrelid, i.indkey::text, i.indisprimary, i.indisreplident, i.indisvalid), ','
                     ORDER BY i.indexrelid) FROM pg_index i WHERE i.indrelid = c.oid),
  (SELECT string_agg(concat_ws(':', t.relid, l.relkind, l.relreplident, (SELECT count(*) FROM pg_index x
                                WHERE x.indrelid = t.relid AND (x.indisprimary OR x.indisreplident))), ','
                     ORDER BY t.relid) FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid),
  (WITH RECURSIVE d(oid) AS (SELECT inhrelid FROM pg_inherits WHERE inhparent = c.oid
                             UNION SELECT i.inhrelid FROM pg_inherits i JOIN d ON i.inhparent = d.oid)
   SELECT string_agg(oid::text, ',' ORDER BY oid) FROM d)))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY(%s)
"""
# A type that is not built in: a domain (its base type and typmod), an enum (its labels in declared order), an
# array (its element type).
_TYPE = """
SELECT t.typtype, t.typbasetype, t.typtypmod, t.typelem, t.typcategory, format_type(t.oid, NULL),
       (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid)
FROM pg_type t WHERE t.oid = %s
"""
_NO_STREAM = {"m": "a materialized view", "f": "a foreign table", "S": "a sequence"}
_IDENTITY = {"d": "default", "f": "full", "i": "index", "n": "nothing"}


@dataclass(frozen=True)
class SourceTable:
    name: str  # schema.table
    schema: TableSchema
    replica_identity: str  # d(efault) f(ull) i(ndex) n(othing)
    identity: tuple[tuple[str, str], ...] = ()  # ``base.SourceTable.identity``
    partitioned: bool = False
    places: tuple[int, ...] = ()  # ``base.SourceTable.places``: the columns' attnums

    @property
    def has_full_old_rows(self) -> bool:
        return self.replica_identity == "f"


@dataclass(frozen=True)
class _Relation:
    oid: int
    kind: str
    replident: str
    is_partition: bool
    name: str  # schema.table, quoted where it must be
    has_children: bool


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _relation(conn: psycopg.Connection, name: str | None = None, oid: int | None = None) -> _Relation | None:
    where = "to_regclass(%s)" if name is not None else "%s"
    try:
        row = conn.execute(_RELATION.format(where), (name if name is not None else oid,)).fetchone()
    except psycopg.errors.InvalidName:  # a name to_regclass cannot parse names nothing
        return None
    if row is None:
        return None
    return _Relation(row[0], _text(row[1]), _text(row[2]), row[3], spell(row[4], row[5]), row[6])


def describe_table(conn: psycopg.Connection, name: str) -> SourceTable:
    """Read a table's definition; refuse what freshview cannot maintain, saying how to fix it."""
    qualified = name if "." in name else f"public.{name}"
    rel = _relation(conn, qualified)
    if rel is None:
        raise CatalogError(f"table {qualified} does not exist")
    return _describe(conn, rel)


def publishable(conn: psycopg.Connection, name: str) -> tuple[int, str, bool]:
    """(OID, name, partitioned) of a table that may join the publication: one whose presence there leaves the
    application's UPDATE and DELETE working; ``CatalogError`` with the fix otherwise."""
    rel = _relation(conn, name if "." in name else f"public.{name}")
    if rel is None:
        raise CatalogError(f"table {name} does not exist")
    refusal = _refusal(conn, rel)
    if refusal:
        raise CatalogError(refusal)
    return rel.oid, rel.name, rel.kind == "p"


def _describe(conn: psycopg.Connection, rel: _Relation) -> SourceTable:
    refusal = _refusal(conn, rel)
    if refusal:
        raise CatalogError(refusal)
    columns, places = [], []
    for col_name, oid, typmod, not_null, type_name, place in conn.execute(_COLUMNS, (rel.oid,)).fetchall():
        places.append(place)
        try:
            columns.append(Column(col_name, column_type(conn, oid, typmod, type_name), not not_null))
        except UnsupportedTypeError:
            raise CatalogError(f"{rel.name}.{col_name} has type {type_name}, which freshview does not "
                               "maintain yet") from None
    key = _key(conn, rel)
    return SourceTable(rel.name, TableSchema(tuple(columns), key), rel.replident, _identity(conn, rel, key),
                       rel.kind == "p", tuple(places))


def _identity(conn: psycopg.Connection, rel: _Relation, key: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    identity = [("relation", str(rel.oid)), ("primary key", ", ".join(key)),
                ("replica identity", _IDENTITY.get(rel.replident, rel.replident))]
    if rel.kind == "p":
        identity.append(("partitions", ", ".join(str(r[0]) for r in conn.execute(_LEAVES, (rel.oid,)).fetchall())))
    else:  # a view reading the parent without ONLY reads these too (``expansion``, fixed when it was created)
        identity.append(("inheritance children",
                         ", ".join(str(r[0]) for r in conn.execute(_DESCENDANTS, (rel.oid,)).fetchall())))
    return tuple(identity)


def _key(conn: psycopg.Connection, rel: _Relation) -> tuple[str, ...]:
    """The key freshview keys the table's copy by: the replica identity index's columns under REPLICA IDENTITY
    USING INDEX (what the stream sends as an old key), else the primary key's."""
    which = "indisreplident" if rel.replident == "i" else "indisprimary"
    return tuple(r[0] for r in conn.execute(_KEY.format(which), (rel.oid,)).fetchall())


def _refusal(conn: psycopg.Connection, rel: _Relation) -> str | None:
    """Why the relation cannot be followed as a table (and how to fix it), or None."""
    if rel.kind in _NO_STREAM:
        return (f"{rel.name} is {_NO_STREAM[rel.kind]}: it has no change stream, so freshview cannot keep a view "
                "over it fresh" + (" (create a freshview view from its defining query instead)"
                                   if rel.kind == "m" else ""))
    if rel.kind == "v":
        return f"{rel.name} is a view: freshview reads a view through its definition"
    if rel.kind not in ("r", "p"):
        return f"{rel.name} is not a table (relkind {rel.kind})"
    if rel.is_partition:
        parent = conn.execute(_PARENT, (rel.oid,)).fetchone()
        root = spell(parent[0], parent[1]) if parent else "its partitioned table"
        return (f"{rel.name} is a partition of {root}: read {root} instead (with a WHERE on its partition key), "
                "since the changes of its partitions are published as its own")
    if rel.kind == "p":
        if not _key(conn, rel):
            return (f"partitioned table {rel.name} has no primary key: each of its partitions, present and future, "
                    "needs a replica identity for freshview to follow it (REPLICA IDENTITY FULL on the partitioned "
                    f"table does not reach its partitions). Fix it with: ALTER TABLE {rel.name} ADD PRIMARY KEY (...);")
        for _, kind, replident, schema, table, has_key in conn.execute(_LEAVES, (rel.oid,)).fetchall():
            leaf = spell(schema, table)
            if _text(kind) != "r":
                what = _NO_STREAM.get(_text(kind), "not a table")
                return f"partition {leaf} of {rel.name} is {what}: it has no change stream"
            if _text(replident) == "n" or (_text(replident) == "d" and not has_key):
                return _no_identity(leaf, _text(replident))
        return None
    replident = rel.replident
    if replident == "n" or (replident in ("d", "i") and not _key(conn, rel)):
        return _no_identity(rel.name, replident)
    return None


def _no_identity(name: str, replident: str) -> str:
    if replident == "n":
        return (f"{name} has REPLICA IDENTITY NOTHING, so the change stream cannot say which row an UPDATE or "
                f"DELETE touched (and publishing it would make them fail). Fix it with: ALTER TABLE {name} "
                "REPLICA IDENTITY FULL; (or REPLICA IDENTITY DEFAULT with a primary key)")
    return (f"{name} has no primary key and REPLICA IDENTITY is not FULL, so the change stream cannot say which "
            f"row an UPDATE or DELETE touched (and publishing it would make them fail). Fix it with: ALTER TABLE "
            f"{name} REPLICA IDENTITY FULL; (or add a primary key)")


def expansion(conn: psycopg.Connection, name: str) -> str | None:
    """SQL that stands for ``name`` in a view when it is not followed as itself (``base.Source.expansion``):
    a plain view's definition, an inheritance parent's rows and its descendants' (each ``ONLY``)."""
    rel = _relation(conn, name if "." in name else f"public.{name}")
    if rel is None:
        return None
    if rel.kind == "v":  # with every name in the definition qualified: it is read with the service's rules
        path = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
        conn.execute("SELECT set_config('search_path', 'pg_catalog', false)")
        try:
            text = conn.execute("SELECT pg_get_viewdef(%s, true)", (rel.oid,)).fetchone()[0]
        finally:
            conn.execute("SELECT set_config('search_path', %s, false)", (path,))
        return text.strip().rstrip(";").strip()
    if rel.kind != "r" or not rel.has_children:
        return None
    columns = [r[0] for r in conn.execute("SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s AND "
                                          "attnum > 0 AND NOT attisdropped ORDER BY attnum", (rel.oid,)).fetchall()]
    select = ", ".join(columns)
    parent = conn.execute("SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n "
                          "ON n.oid = c.relnamespace WHERE c.oid = %s", (rel.oid,)).fetchone()[0]
    parts = [f"SELECT {select} FROM ONLY {parent}"]
    for _, kind, child, schema, table in conn.execute(_DESCENDANTS, (rel.oid,)).fetchall():
        if _text(kind) != "r":
            raise CatalogError(f"{spell(schema, table)}, a child of {rel.name}, is "
                               f"{_NO_STREAM.get(_text(kind), 'not a table')}: it has no change stream; "
                               f"read ONLY {rel.name} if its rows are not wanted")
        parts.append(f"SELECT {select} FROM ONLY {child}")
    return " UNION ALL ".join(parts)


def recheck(conn: psycopg.Connection, tables: Mapping[str, tuple[tuple[str, str], ...]],
            seen: dict[str, tuple[str, Recheck]] | None = None, names: Mapping[str, str] | None = None
            ) -> dict[str, Recheck]:
    """Followed tables as the catalog describes them now, found by the OID they were followed with (else by
    name: ``names`` has the names now of renamed ones): ``base.Source.recheck``.  ``seen`` remembers each answer with its relation's digest (``_SIGNATURE``):
    a table whose digest did not change is not read again."""
    seen = {} if seen is None else seen
    oids = {t: int(o) for t, identity in tables.items() if (o := dict(identity).get("relation", "")).isdigit()}
    digests = dict(conn.execute(_SIGNATURE, (list(oids.values()),)).fetchall()) if oids else {}
    out: dict[str, Recheck] = {}
    for table, identity in tables.items():
        digest = digests.get(oids.get(table, -1))
        if digest is not None and table in seen and seen[table][0] == digest:
            out[table] = seen[table][1]
            continue
        oid = dict(identity).get("relation")
        rel = _relation(conn, oid=int(oid)) if oid and oid.isdigit() else None
        if rel is None:
            rel = _relation(conn, (names or {}).get(table, table))
        if rel is None:
            out[table] = Recheck(None)
            continue
        refusal = _refusal(conn, rel)  # (a column of a type freshview does not maintain: None in columns)
        identity = () if refusal else _identity(conn, rel, _key(conn, rel))
        columns, places = _columns(conn, rel.oid)
        out[table] = Recheck(rel.name, columns, identity, refusal, places=places)
        if digest is not None and rel.oid == oids.get(table):
            seen[table] = (digest, out[table])
    return out


def column_type(conn: psycopg.Connection, oid: int, typmod: int, type_name: str, depth: int = 0) -> SqlType:
    """The freshview type of a column: a built-in type (``types.sql_type``), a domain as its base type (PostgreSQL
    checks its constraint), an enum with its labels in declared order, an array of any of these."""
    try:
        return sql_type(oid, typmod, type_name)
    except UnsupportedTypeError:
        row = conn.execute(_TYPE, (oid,)).fetchone()
        if row is None or depth > 8:
            raise
    kind, base, base_mod, element, category, name, labels = row
    kind, category = _text(kind), _text(category)
    if kind == "d":
        return column_type(conn, base, base_mod, type_name, depth + 1)
    if kind == "e":
        return SqlType.enum_of(name, labels or [])
    if category == "A" and element:
        try:
            return SqlType.array(column_type(conn, element, typmod, type_name, depth + 1))
        except SchemaError:
            raise UnsupportedTypeError(f"column type {type_name} is not supported") from None
    raise UnsupportedTypeError(f"column type {type_name} is not supported")


def _columns(conn: psycopg.Connection, oid: int) -> tuple[dict[str, SqlType | None], tuple[int, ...]]:
    """The relation's columns' types (None: not maintained) and their attnums, in order."""
    out: dict[str, SqlType | None] = {}
    places = []
    for col_name, type_oid, typmod, _, type_name, place in conn.execute(_COLUMNS, (oid,)).fetchall():
        places.append(place)
        try:
            out[col_name] = column_type(conn, type_oid, typmod, type_name)
        except UnsupportedTypeError:
            out[col_name] = None
    return out, tuple(places)
