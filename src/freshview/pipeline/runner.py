"""Run a pipeline: poll sources, apply their messages as atomic steps of an ``IncrementalFlow``, deliver
each step's view changes to the sinks, exactly once across crashes.

One step, in order:
1. messages polled from each source, replays dropped (``batching.fresh``: at or below the position the
   state holds, or already pending), cut at transaction boundaries (``batching.cut``);
2. ``flow.prepare_debezium`` applies them; inside its transaction (before ``commit``) the runner stores each source's
   last position, writes each sink's payload to the outbox and the emission's sequence number;
3. after the commit, each sink delivers the emission (idempotently), the outbox file goes, and each
   source acknowledges the applied positions to its broker.
A crash anywhere re-does only what the next start can prove undone: unacknowledged messages come again
and are skipped up to the stored position; outbox files up to the committed emission are delivered again
(``outbox.recovery``), and a sink holding one already does nothing.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from freshview.errors import FreshviewError
from freshview.formats.debezium import MessageError
from freshview.pipeline import batching, io, registry
from freshview.pipeline.outbox import Outbox, recovery
from freshview.pipeline.spec import SETTINGS, PipelineError, PipelineSpec

log = logging.getLogger("freshview.pipeline")


@dataclass
class PipelineOptions:
    max_batch: int = 10_000  # messages per source per step (a transaction is never split)
    poll_timeout: float = 0.05  # s: how long an idle poll waits for a first message
    transaction_wait: float = 0.1  # s: how long a trailing transaction may wait for its next message
    execution: str = "auto"


@dataclass
class Progress:
    """Counters shown by ``freshview pipeline run``."""

    started: float = field(default_factory=time.time)
    messages_in: int = 0
    replays_skipped: int = 0
    steps: int = 0
    emissions: int = 0
    sink_messages: dict[str, int] = field(default_factory=dict)
    sink_lag_ms: dict[str, float] = field(default_factory=dict)  # last emission: delivered - first message read

    _mark: tuple[float, int] | None = None

    def line(self) -> str:
        """Counters, with the rate since the previous line."""
        now = time.time()
        since, before = self._mark or (self.started, 0)
        self._mark = (now, self.messages_in)
        rate = (self.messages_in - before) / max(now - since, 1e-9)
        lags = ", ".join(f"{s} {ms:.0f} ms" for s, ms in self.sink_lag_ms.items()) or "-"
        return (f"messages in {self.messages_in:,} ({rate:,.0f}/s) · steps {self.steps:,} · "
                f"last lag {lags}")


@dataclass
class _Pending:
    messages: list[io.Message] = field(default_factory=list)
    decoded: list[Any] = field(default_factory=list)
    transactions: list[str | None] = field(default_factory=list)
    high: int | None = None  # highest position taken in (applied or pending)
    last_arrival: float = 0.0
    filled: bool = False  # the last poll returned as many as asked: more are waiting

    def take(self, n: int) -> tuple[list[io.Message], list[Any]]:
        msgs, dec = self.messages[:n], self.decoded[:n]
        del self.messages[:n], self.decoded[:n], self.transactions[:n]
        return msgs, dec


class PipelineRunner:
    """A pipeline's flow, connectors and loop (``run`` until ``stop``)."""

    def __init__(self, spec: PipelineSpec, state_dir: str | Path, *, spark: Any = None,
                 options: PipelineOptions | None = None) -> None:
        self.spec = spec
        self.state_dir = Path(state_dir)
        self.options = options or PipelineOptions()
        self.spark = spark
        self.progress = Progress()
        self.stop_event = threading.Event()
        self.flow = None
        self.sources: dict[str, io.MessageSource] = {}
        self.sinks: dict[str, io.MessageSink] = {}

    # ---------------------------------------------------------------- start
    def open(self) -> None:
        from freshview.flow import IncrementalFlow

        self.state_dir.mkdir(parents=True, exist_ok=True)
        settings = {SETTINGS[k]: v for k, v in self.spec.settings.items()}
        kwargs: dict[str, Any] = {}
        if "flush_interval" in settings:
            kwargs["flush_interval"] = settings["flush_interval"]
        if "state_ttl" in settings:
            kwargs["state_ttl"] = settings["state_ttl"]
        try:
            self.flow = IncrementalFlow(self.spark, self.state_dir / "flow", execution=self.options.execution,
                                        **kwargs)
        except TypeError as exc:
            raise PipelineError(f"this freshview cannot apply the pipeline's settings: {exc}") from None
        flow = self.flow
        self.pipeline_id = flow.get_meta("pipeline/id")
        if self.pipeline_id is None:
            self.pipeline_id = uuid.uuid4().hex[:12]
            flow.set_meta("pipeline/id", self.pipeline_id)
        for src in self.spec.sources.values():
            if src.name in flow.sources:
                if flow.source_schema(src.name) != src.schema:
                    raise PipelineError(f"source {src.name!r} differs from the one in {self.state_dir}; run the "
                                        "changed pipeline with a new --state-dir")
            else:
                flow.register_source(src.name, src.schema)
        for name in set(flow.views) - set(self.spec.views):
            log.info("view %s is no longer in the pipeline: dropped", name)
            flow.drop_view(name)
        self.outbox = Outbox(self.state_dir / "outbox")
        self.emitted = flow.get_meta("pipeline/emitted", 0)
        new = [v for v in self.spec.views if v not in flow.views]
        if new:  # their first results go to the sinks as the emission after the last one
            flow.set_meta("pipeline/initial", {"views": new, "seq": self.emitted + 1})
        flow.register_views([(v.name, v.sql) for v in self.spec.views.values()])
        for sink in self.spec.sinks.values():
            connector = registry.make_sink(sink.name, sink.options, self.state_dir)
            connector.open(sink.view, flow.view_columns(sink.view), flow.view_plan(sink.view), self.pipeline_id)
            self.sinks[sink.name] = connector
        self._recover()
        initial = flow.get_meta("pipeline/initial")
        self.encoders = {s.name: flow.debezium_encoder(s.view, s.decimal_handling, s.schemas)
                         for s in self.spec.sinks.values()}
        if initial is not None and self.emitted < initial["seq"]:
            for sink in self.spec.sinks.values():  # from nothing: every row is new
                if sink.view in initial["views"] and self.encoders[sink.name].counts is not None:
                    self.encoders[sink.name].counts = {}
            first = {v: flow.snapshot(v, weighted=True) for v in initial["views"]}
            self._deliver(self._prepare({v: t for v, t in first.items() if t.num_rows}, None), None)
            self.encoders = {s.name: flow.debezium_encoder(s.view, s.decimal_handling, s.schemas)
                             for s in self.spec.sinks.values()}
        self.pending: dict[str, _Pending] = {}
        for src in self.spec.sources.values():
            connector = registry.make_source(src.name, src.options, self.state_dir)
            applied = flow.get_meta(f"pipeline/source/{src.name}")
            connector.open(applied)
            self.sources[src.name] = connector
            self.pending[src.name] = _Pending(high=applied)

    def _recover(self) -> None:
        deliver, discard = recovery(self.outbox.files(), self.emitted)
        for seq, sink in discard:
            self.outbox.remove(seq, sink)
        for seq, sink in deliver:
            if sink in self.sinks:
                log.info("re-delivering emission %d to sink %s", seq, sink)
                self.sinks[sink].deliver(seq, self.outbox.read(seq, sink), recovering=True)
            self.outbox.remove(seq, sink)

    # ---------------------------------------------------------------- loop
    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Steps until ``stop()`` (or ``until()`` is true); the step in progress finishes first."""
        last_flush = time.monotonic()
        while not self.stop_event.is_set() and not (until is not None and until()):
            stepped = self.run_once()
            if not stepped and self.flow.flush_interval is not None and time.monotonic() - last_flush > 0.05:
                self._flush()
                last_flush = time.monotonic()

    def run_once(self) -> bool:
        """Poll every source once and apply what is ready as one step; False when nothing was."""
        timeout = self.options.poll_timeout / max(1, len(self.sources))
        for name, source in self.sources.items():
            self._poll(name, source, timeout)
        now = time.time()
        batches: dict[str, tuple[list[io.Message], list[Any]]] = {}
        for name, p in self.pending.items():
            if not p.messages:
                continue
            arriving = p.filled or now - p.last_arrival < self.options.transaction_wait
            n = batching.cut(p.transactions, self.options.max_batch, more_may_follow=arriving)
            if n:
                batches[name] = p.take(n)
        if not batches:
            return False
        self._step(batches)
        return True

    def _poll(self, name: str, source: io.MessageSource, timeout: float) -> None:
        p = self.pending[name]
        room = self.options.max_batch - len(p.messages)
        if room <= 0:
            p.filled = True
            return
        got = source.poll(room, timeout)
        p.filled = len(got) >= room
        if not got:
            return
        skip = batching.fresh([m.position for m in got], p.high)
        if skip:
            self.progress.replays_skipped += skip
            got = got[skip:]
            if not p.messages and p.high is not None:
                source.acknowledge(p.high)
        for m in got:
            d = batching.decode(m.payload)
            p.messages.append(m)
            p.decoded.append(d)
            p.transactions.append(batching.transaction_of(d))
        if got:
            p.high = got[-1].position
            p.last_arrival = time.time()

    def _step(self, batches: dict[str, tuple[list[io.Message], list[Any]]]) -> None:
        flow = self.flow
        positions = {name: msgs[-1].position for name, (msgs, _) in batches.items()}
        first_read = min(msgs[0].received for msgs, _ in batches.values())
        ts = [batching.ts_ms_of(d) for _, decoded in batches.values() for d in decoded]
        source_ts = max((t for t in ts if t is not None), default=None)
        emission: list[tuple[int, str]] = []
        try:
            step = flow.prepare_debezium({name: decoded for name, (_, decoded) in batches.items()})
            with step:  # the sinks' payloads and the positions go in with the step, or nothing does
                for name, position in positions.items():
                    step.set_meta(f"pipeline/source/{name}", position)
                emission.extend(self._prepare(step.outputs, source_ts))
                step.commit()
        except MessageError as exc:
            source = exc.source or next(iter(batches))
            msgs = batches.get(source, next(iter(batches.values())))[0]
            at = msgs[exc.offset].position if 0 <= exc.offset < len(msgs) else "?"
            raise PipelineError(f"source {source!r}, message at position {at}: {exc.reason}; nothing of this "
                                "step was applied") from None
        except FreshviewError as exc:
            self._forget(emission)
            raise PipelineError(f"a step failed and was rolled back: {exc}") from None
        self.progress.messages_in += sum(len(m) for m, _ in batches.values())
        self.progress.steps += 1
        self._deliver(emission, first_read)
        for name, position in positions.items():
            self.sources[name].acknowledge(position)

    def _flush(self) -> None:
        with self.flow.prepare_flush(force=False) as step:
            emission = self._prepare(step.outputs, None)
            step.commit()
        self._deliver(emission, None)

    def _prepare(self, outputs: dict[str, pa.Table], source_ts: int | None) -> list[tuple[int, str]]:
        """Inside the step: each sink's payload into the outbox, and the emission's number with the step."""
        sinks = [s for s in self.spec.sinks.values() if s.view in outputs]
        if not sinks:
            return []
        seq = self.emitted + 1
        step = self.flow.step
        out = []
        for sink in sinks:
            encoder = self.encoders[sink.name]
            payload = self.sinks[sink.name].prepare(
                seq, outputs[sink.view], lambda change: encoder.encode(change, step, source_ts_ms=source_ts))
            self.outbox.write(seq, sink.name, payload)
            out.append((seq, sink.name))
        self.flow.set_meta("pipeline/emitted", seq)
        self.emitted = seq  # (a failed commit stops the runner: the next start reads it again)
        return out

    def _forget(self, emission: list[tuple[int, str]]) -> None:
        for seq, sink in emission:
            self.outbox.remove(seq, sink)

    def _deliver(self, emission: list[tuple[int, str]], first_read: float | None) -> None:
        for seq, sink in emission:
            payload = self.outbox.read(seq, sink)
            self.sinks[sink].deliver(seq, payload, recovering=False)
            self.outbox.remove(seq, sink)
            self.progress.sink_messages[sink] = self.progress.sink_messages.get(sink, 0) + 1
            if first_read is not None:
                self.progress.sink_lag_ms[sink] = (time.time() - first_read) * 1000
        if emission:
            self.progress.emissions += 1

    # ---------------------------------------------------------------- stop
    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        for connector in list(self.sources.values()) + list(self.sinks.values()):
            try:
                connector.close()
            except Exception as exc:  # closing is best effort
                log.debug("closing a connector: %s", exc)
        if self.flow is not None:
            self.flow.close()
            self.flow = None
