"""connectors.mysql.access: an account's SELECT privileges from the grant tables, decided purely."""

from __future__ import annotations

from freshview.connectors.base import ReadRights
from freshview.connectors.mysql.access import Account, AccountGrants, account_for, like, read_rights, roles_of


def test_accounts_read_as_current_user_writes_them():
    assert Account.parse("bob@%") == Account("bob", "%")
    assert Account.parse("b@b@10.0.0.1") == Account("b@b", "10.0.0.1")
    assert str(Account("o'brien", "10.0.%")) == "'o''brien'@'10.0.%'"


def test_like_matches_host_and_database_patterns():
    assert like("%", "10.0.0.5") and like("10.0.0.%", "10.0.0.5") and not like("10.0.0.%", "10.0.1.5")
    assert like("app_", "app1") and like("app\\_", "app_") and not like("app\\_", "app1")
    assert like("LOCALHOST", "localhost", case=False) and not like("App", "app")
    assert like("a.b", "a.b") and not like("a.b", "axb")  # regex characters are literal


def test_the_account_of_a_requester():
    assert account_for(Account("bob", "%"), ["%", "localhost"]) == Account("bob", "%")  # named exactly
    assert account_for(Account("bob", "10.0.0.5"), ["10.0.0.%", "localhost"]) == Account("bob", "10.0.0.%")  # a login
    assert account_for(Account("bob", "10.0.0.5"), ["10.0.0.%", "%"]) is None  # which one: cannot tell
    assert account_for(Account("bob", "%"), []) is None


def test_roles_reach_through_roles():
    mapping = [("bob", "%", "analyst"), ("analyst", "", "reader"), ("reader", "", "analyst"), ("other", "", "admin")]
    assert roles_of("analyst", mapping) == {"analyst", "reader"}
    assert roles_of(None, mapping) == set()


def test_read_rights_from_grants():
    reads = {"app.secret": frozenset({"a", "b"}), "app.open": frozenset(), "sales.t": frozenset({"x"})}
    nothing = read_rights(AccountGrants(), reads)
    assert nothing["app.secret"] == ReadRights(denied=frozenset({"a", "b"}), any_column=False)
    assert nothing["app.open"] == ReadRights(denied=frozenset(), any_column=False)
    assert set(read_rights(AccountGrants(global_select=True), reads).values()) == {ReadRights()}
    by_db = read_rights(AccountGrants(databases=("ap_",)), reads)
    assert by_db["app.secret"] == ReadRights() and by_db["sales.t"].denied == {"x"}
    by_table = read_rights(AccountGrants(tables=frozenset({("app", "open")})), reads)
    assert by_table["app.open"] == ReadRights() and by_table["app.secret"].denied == {"a", "b"}
    by_column = read_rights(AccountGrants(columns=frozenset({("app", "secret", "a"), ("app", "open", "z")})), reads)
    assert by_column["app.secret"] == ReadRights(denied=frozenset({"b"}), any_column=True)
    assert by_column["app.open"] == ReadRights(denied=frozenset(), any_column=True)  # rows only: some column is enough
    assert read_rights(AccountGrants(tables=frozenset({("App", "secret")})), reads)["app.secret"].denied  # case kept
