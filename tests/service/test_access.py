"""service.access: who may have a view computed with their rights (pure rule, fakes for the database)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from freshview.connectors.base import Connector, ReadRights
from freshview.service import access
from freshview.service.access import AccessDenied, refusal

WHO = "role bob"
READS = {"public.secret": frozenset({"a", "b"}), "public.open": frozenset()}


def test_a_requester_who_may_read_everything_is_not_refused():
    rights = {"public.secret": ReadRights(), "public.open": ReadRights()}
    assert refusal("public.v", WHO, READS, rights) is None
    assert refusal("public.v", WHO, {}, None) is None  # a view reading no table hides nothing


def test_missing_column_privileges_are_named_with_their_table():
    rights = {"public.secret": ReadRights(denied=frozenset({"b", "c"})), "public.open": ReadRights()}
    message = refusal("public.v", WHO, READS, rights)
    assert message == ("freshview: permission denied for view public.v: role bob may not SELECT column b "
                       "of table public.secret")  # c is not read: not named
    both = {"public.secret": ReadRights(denied=frozenset({"a", "b"}), any_column=False), "public.open": ReadRights()}
    assert "may not SELECT columns a, b of table public.secret" in refusal("public.v", WHO, READS, both)


def test_reading_rows_only_needs_some_column():
    rights = {"public.secret": ReadRights(), "public.open": ReadRights(any_column=False)}
    assert refusal("public.v", WHO, READS, rights).endswith("role bob may not SELECT table public.open")
    # a column privilege on one column is enough to count rows, as in PostgreSQL
    rights = {"public.secret": ReadRights(), "public.open": ReadRights(denied=frozenset({"x"}), any_column=True)}
    assert refusal("public.v", WHO, READS, rights) is None


def test_row_level_security_schema_usage_and_unknown_requesters():
    rls = {"public.secret": ReadRights(row_security=True), "public.open": ReadRights()}
    message = refusal("public.v", WHO, READS, rls)
    assert "table public.secret has row-level security enabled" in message and "role bob does not bypass" in message
    usage = {"public.secret": ReadRights(schema_usage=False), "public.open": ReadRights()}
    assert "role bob has no USAGE on the schema of table public.secret" in refusal("public.v", WHO, READS, usage)
    assert refusal("public.v", WHO, READS, None) == "freshview: permission denied for view public.v: role bob does not exist"
    gone = {"public.secret": ReadRights(exists=False)}
    assert "table public.open does not exist" in refusal("public.v", WHO, READS, gone)
    assert "table public.secret does not exist" in refusal("public.v", WHO, READS, gone)


def test_every_problem_is_listed():
    rights = {"public.secret": ReadRights(denied=frozenset({"a"}), row_security=True),
              "public.open": ReadRights(any_column=False)}
    message = refusal("public.v", WHO, READS, rights)
    assert message.index("table public.open") < message.index("column a of table public.secret") < message.index(
        "row-level security")


@dataclass
class FakeGrants:
    rights: dict[str, ReadRights] | None
    asked: list = field(default_factory=list)

    def who(self, requester: str) -> str:
        return f"role {requester}"

    def read_rights(self, requester, reads):
        self.asked.append((requester, dict(reads)))
        return self.rights


@dataclass
class FakeControl:
    denied: str | None = None
    owner: dict = field(default_factory=dict)

    def denial(self, request_id: int) -> str | None:
        return self.denied

    def owners(self) -> dict:
        return self.owner


def connector(rights, denied=None, owners=None) -> Connector:
    return Connector(None, None, FakeControl(denied, owners or {}), None, grants=FakeGrants(rights))  # type: ignore[arg-type]


def test_check_asks_for_the_requester_and_raises_the_refusal():
    fake = connector({"public.secret": ReadRights(denied=frozenset({"a"})), "public.open": ReadRights()})
    with pytest.raises(AccessDenied, match="role bob may not SELECT column a of table public.secret"):
        access.check(fake, "public.v", READS, "bob", request=7)
    assert fake.grants.asked == [("bob", READS)]
    access.check(fake, "public.v", READS, None)  # no requester recorded: an administrator's old view


def test_the_databases_own_refusal_counts_when_the_service_finds_nothing():
    allowed = {"public.secret": ReadRights(), "public.open": ReadRights()}
    fake = connector(allowed, denied="permission denied for function f")
    with pytest.raises(AccessDenied, match="the database refused role bob's query: permission denied for function f"):
        access.check(fake, "public.v", READS, "bob", request=7)
    access.check(fake, "public.v", READS, "bob")  # a rebuild has no request: the service's check alone


def test_recheck_lists_the_views_whose_requester_lost_a_right():
    from freshview.plan import nodes as pn
    from freshview.schema import SqlType
    from freshview.service.names import Names

    class Rules:
        def split(self, text):
            return tuple(text.split(".")) if "." in text else (None, text)

        def spell(self, schema, table):
            return f"{schema}.{table}"

    plan = pn.Scan("secret", (("a", SqlType("int4")),))
    fake = connector({"public.secret": ReadRights(denied=frozenset({"a"}))},
                     owners={"public.v": "bob", "public.old": None})
    found = access.recheck(fake, {"public.v": plan, "public.old": plan}, Names("public", Rules()))
    assert [(r.name, r.requester) for r in found] == [("public.v", "bob")]
    assert "column a of table public.secret" in found[0].reason


def test_a_renamed_tables_rights_are_asked_under_its_names_now():
    from freshview.connectors.base import Renamed

    reads = {"public.orders": frozenset({"id", "amount"}), "public.customers": frozenset()}
    assert access.renamed_reads(reads, {"public.orders": Renamed("sales.ledger", {"amount": "due"})}) == \
        {"sales.ledger": frozenset({"id", "due"}), "public.customers": frozenset()}
    assert access.renamed_reads(reads, {}) == reads
