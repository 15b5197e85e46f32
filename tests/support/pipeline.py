"""Pipeline test helpers: publish to and read back from JetStream, and replay Debezium messages strictly."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Iterable


def stream_name(subject: str) -> str:
    return "FRESHVIEW_" + "".join(c if c.isalnum() else "_" for c in subject).upper()


async def _ensure(js, subject: str) -> None:
    try:
        await js.find_stream_name_by_subject(subject)
    except Exception:
        await js.add_stream(name=stream_name(subject), subjects=[subject])


def publish(url: str, subject: str, messages: Iterable[Any]) -> None:
    import nats

    async def go() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await _ensure(js, subject)
        pending = [js.publish(subject, json.dumps(m).encode() if not isinstance(m, bytes) else m)
                   for m in messages]
        for at in range(0, len(pending), 500):
            await asyncio.gather(*pending[at:at + 500])
        await nc.close()
    asyncio.run(go())


def read_subject(url: str, subject: str) -> list[dict]:
    """Every message on ``subject`` (from its stream's start), decoded."""
    import nats

    async def go() -> list[dict]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        try:
            stream = await js.find_stream_name_by_subject(subject)
        except Exception:
            await nc.close()
            return []
        info = await js.stream_info(stream)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except Exception:
                continue
            if msg.subject == subject:
                out.append(json.loads(msg.data))
        await nc.close()
        return out
    return asyncio.run(go())


class Replay:
    """A sink's contents rebuilt from its Debezium messages, refusing any that does not follow from the
    ones before (a lost or doubled message shows up as a ``c`` of a present key or a ``d``/``u`` whose
    ``before`` is not the row held)."""

    def __init__(self, key: list[str] | None) -> None:
        self.key = key  # None: all columns except _fv_count
        self.rows: dict[tuple, dict] = {}

    def _k(self, image: dict) -> tuple:
        names = self.key if self.key is not None else sorted(n for n in image if n != "_fv_count")
        return tuple(json.dumps(image[n], sort_keys=True) for n in names)

    def apply(self, messages: Iterable[dict]) -> "Replay":
        for i, m in enumerate(messages):
            m = m["payload"] if "payload" in m and "op" not in m else m  # Kafka Connect's envelope
            op, before, after = m["op"], m.get("before"), m.get("after")
            if op == "c":
                assert self._k(after) not in self.rows, f"message {i}: c of a present row {after}"
                self.rows[self._k(after)] = after
            elif op == "u":
                assert self.rows.get(self._k(before)) == before, f"message {i}: u of {before}, held " \
                    f"{self.rows.get(self._k(before))}"
                del self.rows[self._k(before)]
                self.rows[self._k(after)] = after
            elif op == "d":
                assert self.rows.get(self._k(before)) == before, f"message {i}: d of {before}"
                del self.rows[self._k(before)]
            else:
                raise AssertionError(f"message {i}: op {op!r}")
        return self

    def multiset(self, columns: list[str], convert) -> list[tuple]:
        out = []
        for row in self.rows.values():
            values = tuple(convert(n, row[n]) for n in columns)
            out.extend([values] * int(row.get("_fv_count", 1)))
        return sorted(out, key=repr)
