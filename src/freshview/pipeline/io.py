"""The connector interface of pipelines: message sources and sinks, and the registry that names them.

A **source** yields messages in order, each with a growing ``position``; the runner stores the last
applied position with the step (``batching.fresh`` skips replays) and calls ``acknowledge`` only after
the step committed, so a broker that re-delivers unacknowledged messages loses nothing.  A **sink**
turns a view's change into a payload inside the step (``prepare``: the outbox holds it) and
``deliver``s it after the commit, idempotently per emission sequence.

A Kafka connector is a drop-in: a source whose position is the partition offset (one source per
partition, or a position per partition), ``acknowledge`` committing the consumer group's offset; a sink
producing with an idempotent/transactional producer and finding the last delivered sequence in a header
of the topic's last record, as the NATS sink does with ``Nats-Msg-Id``.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Mapping, Protocol, TypeVar

import pyarrow as pa

from freshview.pipeline.spec import PipelineError

T = TypeVar("T")


@dataclass(frozen=True)
class Message:
    payload: bytes
    position: int  # grows along the source: a stream sequence, the byte offset after a line
    received: float  # time.time() when read


class MessageSource(Protocol):
    def open(self, applied: int | None) -> None:
        """Connect; ``applied`` is the position of the last message a committed step applied."""

    def poll(self, max_messages: int, timeout: float) -> list[Message]:
        """Up to ``max_messages`` next messages, waiting at most ``timeout`` s for the first one."""

    def acknowledge(self, position: int) -> None:
        """Every message up to ``position`` is applied and committed."""

    def close(self) -> None: ...


class MessageSink(Protocol):
    def open(self, view: str, columns: Any, plan: Any, pipeline_id: str) -> None:
        """Connect and prepare the destination for ``view``'s changes."""

    def prepare(self, seq: int, change: pa.Table, encode: Callable[[pa.Table], list[dict]]) -> bytes:
        """Inside the step: the payload that delivers ``change`` (view columns + ``_weight``);
        ``encode`` renders it as Debezium messages at this step's state."""

    def deliver(self, seq: int, payload: bytes, recovering: bool) -> None:
        """After the commit: make the destination hold emission ``seq`` exactly once (a sink holding
        ``seq`` already does nothing)."""

    def close(self) -> None: ...


def option(options: Mapping[str, str], name: str, what: str, default: str | None = None) -> str:
    value = options.get(name, default)
    if value is None:
        raise PipelineError(f"{what}: connector {options.get('connector')!r} needs the option {name!r}")
    return value


class AsyncBridge:
    """One asyncio loop on a daemon thread, shared by the async clients (nats-py); ``run`` waits for a coroutine."""

    _lock = threading.Lock()
    _instance: "AsyncBridge | None" = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="freshview-io", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> "AsyncBridge":
        with cls._lock:
            if cls._instance is None:
                cls._instance = AsyncBridge()
            return cls._instance

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
