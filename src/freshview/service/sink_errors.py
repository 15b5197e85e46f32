"""A result table that refuses a step's rows: its view stops alone, then is rebuilt.

A user (or a migration) may change a result table by hand: a CHECK constraint or a trigger that rejects
rows, a column dropped or retyped, the table dropped.  The step's transaction then fails on that table's
statements (``SinkError``, raised by the connector, which names the table).  Nothing of the step is
written; the view (and the views reading it) stops with status ``sink error`` and the database's message,
and the step is tried again without it, so the other views go on (``Core._step``).  After ``retry_s`` the
view is rebuilt beside the loop like a view whose state was lost (``ViewCatalog.start_rebuilds``): its
table is created anew and filled (a table the user made, ``use_existing_table``, is refilled), or, if
the table still refuses the rows, the view fails with the message.  A restart rebuilds views found in
``sink error`` at once.  What to do is decided here, as pure functions; the catalog does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SINK_ERROR = "sink error"  # the status in freshview.views


def message(error: str, retry_s: float) -> str:
    """What ``freshview.views.error`` says of a view stopped by ``error`` (the connector's ``SinkError``)."""
    return (f"{error}; the other views go on, and this one is rebuilt into a new table in {retry_s:g} s "
            "(to keep the table as it is: CALL freshview.drop_view)")


@dataclass
class SinkErrors:
    """The views stopped by a sink error and when each is rebuilt (monotonic seconds)."""

    retry_s: float = 30.0
    due: dict[str, float] = field(default_factory=dict)

    def stopped(self, names: list[str], now: float) -> None:
        for name in names:
            self.due[name] = now + self.retry_s

    def found_at_start(self, rows: list[tuple[str, str, str]]) -> None:
        """Views ``freshview.views`` shows in ``sink error`` when the service attaches: rebuilt at once."""
        self.due.update({name: 0.0 for name, _, status in rows if status == SINK_ERROR})

    def take_due(self, now: float) -> list[str]:
        """The views whose wait is over (forgotten here: the rebuild takes them)."""
        names = [name for name, at in self.due.items() if at <= now]
        for name in names:
            del self.due[name]
        return names
