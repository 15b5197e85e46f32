"""control.drop_refusal: who may drop a view (pure rule; the database facts come from control.drop_rights)."""

from __future__ import annotations

from freshview.connectors.postgres.control import DropRights, drop_refusal


def test_the_creator_may_drop_its_view():
    assert drop_refusal("public.v", DropRights("alice", "alice", member_of_owner=True)) is None
    assert drop_refusal("public.v", DropRights("alice", "alice")) is None  # even if the role lookup failed


def test_members_of_the_creator_superusers_and_the_schema_owner_may_drop_it():
    assert drop_refusal("public.v", DropRights("team_lead", "alice", member_of_owner=True)) is None
    assert drop_refusal("public.v", DropRights("postgres", "alice", superuser=True)) is None
    assert drop_refusal("public.v", DropRights("admin", "alice", schema_admin=True)) is None


def test_another_role_is_refused_with_who_may():
    message = drop_refusal("public.v", DropRights("bob", "alice"))
    assert message is not None
    assert "permission denied to drop view public.v for role bob" in message
    assert "the role that created it (alice)" in message and "superuser" in message


def test_a_view_without_a_recorded_creator_is_for_administrators_only():
    message = drop_refusal("public.old", DropRights("bob", None))
    assert message is not None and "no creator is recorded" in message
    assert drop_refusal("public.old", DropRights(None, None)) is not None
