"""NATS JetStream: a durable pull consumer as a source, a subject of a stream as a sink.

Source: the position is the message's stream sequence; the consumer acknowledges all-up-to
(``AckPolicy.ALL``) once the step that applied a message committed, so after a crash the broker
re-delivers what was not acknowledged and the runner skips what the state already holds.

Sink: each Debezium message (in Kafka Connect's ``{"schema", "payload"}`` envelope unless the sink says
``schemas = false``; ``formats.debezium``) is published with a ``Nats-Msg-Id`` of ``<pipeline>:<sink>:<emission>:<i>``,
awaiting JetStream's acknowledgement; a re-delivery after a crash first reads the subject's last
message and publishes only what follows it (and JetStream's duplicate window drops any repeat).
A stream that captures the subject is found, or created (file storage) when there is none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import pyarrow as pa

from freshview.pipeline.io import AsyncBridge, Message, option
from freshview.pipeline.spec import PipelineError

log = logging.getLogger("freshview.pipeline")
PUBLISH_WINDOW = 512  # publishes in flight at once


def _import_nats():
    try:
        import nats  # noqa: F401
        from nats.js import api
    except ImportError:  # pragma: no cover - a declared dependency
        raise PipelineError("the NATS connector needs the nats-py package (pip install nats-py)") from None
    return nats, api


async def _connect(url: str, what: str):
    nats, _ = _import_nats()
    try:
        return await nats.connect(url, name="freshview", connect_timeout=5, max_reconnect_attempts=-1,
                                  reconnect_time_wait=0.5)
    except Exception as exc:  # nats raises several types for an unreachable server
        raise PipelineError(f"{what}: cannot connect to NATS at {url}: {exc}") from None


async def _stream_for(js, subject: str, stream: str | None, what: str) -> str:
    _, api = _import_nats()
    if stream:
        try:
            await js.stream_info(stream)
        except Exception:
            await js.add_stream(name=stream, subjects=[subject], storage=api.StorageType.FILE)
            log.info("%s: created JetStream stream %s for subject %s", what, stream, subject)
        return stream
    try:
        return await js.find_stream_name_by_subject(subject)
    except Exception:
        name = "FRESHVIEW_" + "".join(c if c.isalnum() else "_" for c in subject).upper()
        await js.add_stream(name=name, subjects=[subject], storage=api.StorageType.FILE)
        log.info("%s: created JetStream stream %s for subject %s", what, name, subject)
        return name


class NatsSource:
    def __init__(self, name: str, options: Mapping[str, str], state_dir: Path) -> None:
        self.name = name
        self.what = f"source {name!r}"
        self.url = option(options, "url", self.what, "nats://127.0.0.1:4222")
        self.subject = option(options, "subject", self.what)
        self.stream = options.get("stream")
        self.durable = options.get("durable", "freshview_" + "".join(c if c.isalnum() else "_" for c in name))
        self.bridge = AsyncBridge.get()
        self._unacked: list[Any] = []  # fetched messages not acknowledged yet, in order

    def open(self, applied: int | None) -> None:
        self.bridge.run(self._open(applied))

    async def _open(self, applied: int | None) -> None:
        _, api = _import_nats()
        self.nc = await _connect(self.url, self.what)
        self.js = self.nc.jetstream()
        stream = await _stream_for(self.js, self.subject, self.stream, self.what)
        config = api.ConsumerConfig(ack_policy=api.AckPolicy.ALL, ack_wait=120, max_ack_pending=1_000_000,
                                    filter_subject=self.subject)
        if applied is not None:  # start right after what the state holds
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = applied + 1
        # The state, not the consumer, knows what is applied: a consumer left by a crash would hold back
        # the messages it delivered but never saw acknowledged until its ack_wait ran out.
        try:
            await self.js.delete_consumer(stream, self.durable)
        except Exception:  # none yet
            pass
        self.sub = await self.js.pull_subscribe(self.subject, durable=self.durable, stream=stream, config=config)

    def poll(self, max_messages: int, timeout: float) -> list[Message]:
        return self.bridge.run(self._poll(max_messages, max(timeout, 0.01)))

    async def _poll(self, max_messages: int, timeout: float) -> list[Message]:
        nats, _ = _import_nats()
        try:
            msgs = await self.sub.fetch(batch=max(1, max_messages), timeout=timeout)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return []
        now = time.time()
        self._unacked.extend(msgs)
        return [Message(m.data, m.metadata.sequence.stream, now) for m in msgs]

    def acknowledge(self, position: int) -> None:
        last = None
        while self._unacked and self._unacked[0].metadata.sequence.stream <= position:
            last = self._unacked.pop(0)
        if last is not None:
            self.bridge.run(last.ack())

    def close(self) -> None:
        if getattr(self, "nc", None) is not None:
            try:
                self.bridge.run(self.nc.close(), timeout=5)
            except Exception:  # closing is best effort
                pass
            self.nc = None


class NatsSink:
    def __init__(self, name: str, options: Mapping[str, str], state_dir: Path) -> None:
        self.name = name
        self.what = f"sink {name!r}"
        self.url = option(options, "url", self.what, "nats://127.0.0.1:4222")
        self.subject = option(options, "subject", self.what)
        self.stream_option = options.get("stream")
        self.bridge = AsyncBridge.get()

    def open(self, view: str, columns: Any, plan: Any, pipeline_id: str) -> None:
        self.prefix = f"{pipeline_id}:{self.name}:"
        self.bridge.run(self._open())

    async def _open(self) -> None:
        self.nc = await _connect(self.url, self.what)
        self.js = self.nc.jetstream()
        self.stream = await _stream_for(self.js, self.subject, self.stream_option, self.what)

    def prepare(self, seq: int, change: pa.Table, encode: Callable[[pa.Table], list[dict]]) -> bytes:
        return b"\n".join(json.dumps(m, separators=(",", ":")).encode() for m in encode(change))

    def deliver(self, seq: int, payload: bytes, recovering: bool) -> None:
        if payload:
            self.bridge.run(self._deliver(seq, payload.split(b"\n"), recovering))

    async def _deliver(self, seq: int, lines: list[bytes], recovering: bool) -> None:
        start = 0
        if recovering:
            done = await self._last_delivered()
            if done is not None and done[0] > seq:
                return
            if done is not None and done[0] == seq:
                start = done[1] + 1
        for at in range(start, len(lines), PUBLISH_WINDOW):
            acks = await asyncio.gather(*(
                self.js.publish(self.subject, lines[i], stream=self.stream,
                                headers={"Nats-Msg-Id": f"{self.prefix}{seq}:{i}"})
                for i in range(at, min(at + PUBLISH_WINDOW, len(lines)))))
            del acks  # each awaited: stored by JetStream (or a duplicate it dropped)

    async def _last_delivered(self) -> tuple[int, int] | None:
        """(emission, index) of the subject's last message if this sink published it."""
        try:
            last = await self.js.get_last_msg(self.stream, self.subject)
        except Exception:
            return None
        msg_id = (last.headers or {}).get("Nats-Msg-Id", "")
        if not msg_id.startswith(self.prefix):
            return None
        seq, _, index = msg_id[len(self.prefix):].partition(":")
        return (int(seq), int(index)) if seq.isdigit() and index.isdigit() else None

    def close(self) -> None:
        if getattr(self, "nc", None) is not None:
            try:
                self.bridge.run(self.nc.close(), timeout=5)
            except Exception:
                pass
            self.nc = None
