"""PostgreSQL's source behind ``connectors.base``: which walsender errors mean a lost position."""

from __future__ import annotations

import pytest

from freshview.connectors.base import PositionLost, StreamError
from freshview.connectors.postgres.lsn import Lsn
from freshview.connectors.postgres.replication import ReplicationError
from freshview.connectors.postgres.source import PostgresStream, lost_position


@pytest.mark.parametrize("message, lost", [
    ('START_REPLICATION failed: ERROR:  replication slot "freshview_x" does not exist', True),
    ('ERROR:  can no longer get changes from replication slot "freshview_x"', True),
    ("This slot has been invalidated because it exceeded the maximum reserved size.", True),
    ('ERROR:  publication "freshview" does not exist', False),
    ("replication stream ended: FATAL:  terminating connection due to administrator command", False),
])
def test_which_errors_lose_the_position(message, lost):
    assert lost_position(message) is lost


class Broken:
    waited_s = 0.0

    def __init__(self, message: str) -> None:
        self.message = message

    def payloads(self, timeout: float):
        raise ReplicationError(self.message)
        yield  # pragma: no cover


def test_a_broken_stream_reads_as_a_stream_error_and_a_lost_slot_as_position_lost():
    with pytest.raises(StreamError) as broken:
        PostgresStream(Broken("replication stream ended: server closed the connection")).read(0.1, 0.1)
    assert not isinstance(broken.value, PositionLost)
    with pytest.raises(PositionLost):
        PostgresStream(Broken('replication slot "s" does not exist')).read(0.1, 0.1)


def test_lsn_positions_order_as_numbers_and_round_trip_as_text():
    assert Lsn(0x1_0000_0000) > Lsn(0xFFFF_FFFF) and Lsn(5) <= Lsn(5)
    assert Lsn.from_text(Lsn(0x1_0000_0A00).to_text()) == Lsn(0x1_0000_0A00) and Lsn(0x1_0000_0A00).to_text() == "1/A00"
    assert Lsn.from_text("42") == Lsn(42)  # positions stored as numbers by earlier versions
