"""Which messages make a step, and which are replays: pure functions over positions and transaction ids.

A source's messages arrive in order, each with a position that grows (a JetStream stream sequence, the
byte offset after a JSON line).  The position of the last message a committed step applied is stored
with the step, so after a crash or a broker's re-delivery everything at or below it is a replay.
"""

from __future__ import annotations

import json
from typing import Any, Sequence


def fresh(positions: Sequence[int], applied: int | None) -> int:
    """How many leading messages are replays (position ≤ ``applied``), given ascending ``positions``;
    a broker re-delivers in order, so the replays are a prefix."""
    if applied is None:
        return 0
    n = 0
    for p in positions:
        if p > applied:
            break
        n += 1
    return n


def cut(transactions: Sequence[str | None], limit: int, more_may_follow: bool) -> int:
    """How many of the pending messages the next step takes: at most ``limit``, never ending inside a
    transaction (consecutive messages with one Debezium transaction id).

    A step ends at a transaction boundary before ``limit`` when there is one; a single transaction
    larger than ``limit`` is taken whole.  When ``more_may_follow`` (the fetch filled its batch, or the
    last transaction may still be arriving) the trailing transaction is held back unless it is all there is.
    """
    n = len(transactions)
    if n == 0:
        return 0

    def boundary(b: int) -> bool:  # may a step end just before message b?
        if b == n:
            return not more_may_follow or transactions[n - 1] is None
        return transactions[b] is None or transactions[b] != transactions[b - 1]

    end = b = min(limit, n)
    while b > 0 and not boundary(b):
        b -= 1
    if b > 0:
        return b
    b = end  # the first transaction runs past the limit: take it whole once it is all there
    while b <= n and not boundary(b):
        b += 1
    return b if b <= n else 0


def payload_of(message: Any) -> dict | None:
    """A decoded Debezium message's payload (inside the ``{"schema", "payload"}`` envelope or not), if a dict."""
    if not isinstance(message, dict):
        return None
    payload = message["payload"] if "payload" in message and "op" not in message else message
    return payload if isinstance(payload, dict) else None


def transaction_of(message: Any) -> str | None:
    """The Debezium transaction id of a decoded message, if any."""
    tx = (payload_of(message) or {}).get("transaction")
    if isinstance(tx, dict) and tx.get("id") is not None:
        return str(tx["id"])
    return None


def ts_ms_of(message: Any) -> int | None:
    """A decoded message's ``ts_ms``, if it is an integer."""
    ts = (payload_of(message) or {}).get("ts_ms")
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else None


def decode(payload: bytes) -> Any:
    """A message's JSON (None for an empty payload: a tombstone); undecodable text is left for the
    Debezium reader, which reports it with the message's offset."""
    if not payload:
        return None
    try:
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return payload
