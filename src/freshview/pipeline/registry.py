"""Which class serves a pipeline connector named in a ``CREATE SOURCE``/``CREATE SINK``'s ``connector``
option: ``make_source`` / ``make_sink``.  The connector modules (``jsonl``, ``nats``, ``postgres``) are
imported on first use (nats-py and psycopg only when a pipeline names them); they import ``io``, this
module imports them, and ``io`` imports neither (no import circle).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from freshview.pipeline.spec import PipelineError
from freshview.pipeline.io import MessageSink, MessageSource

_SOURCES: dict[str, Callable[[str, Mapping[str, str], Any], MessageSource]] = {}
_SINKS: dict[str, Callable[[str, Mapping[str, str], Any], MessageSink]] = {}


def make_source(name: str, options: Mapping[str, str], state_dir: Any) -> MessageSource:
    return _make("source", _SOURCES, name, options, state_dir)


def make_sink(name: str, options: Mapping[str, str], state_dir: Any) -> MessageSink:
    return _make("sink", _SINKS, name, options, state_dir)


def _make(what: str, registry: Mapping[str, Callable], name: str, options: Mapping[str, str], state_dir: Any):
    _load()
    factory = registry.get(options["connector"])
    if factory is None:
        raise PipelineError(f"{what} {name!r}: unknown connector {options['connector']!r}; "
                            f"known: {', '.join(sorted(registry))}")
    return factory(name, options, state_dir)


def _load() -> None:
    if _SOURCES:
        return
    from freshview.pipeline import jsonl, nats, postgres

    _SOURCES.update({"nats": nats.NatsSource, "jsonl": jsonl.JsonLinesSource})
    _SINKS.update({"nats": nats.NatsSink, "jsonl": jsonl.JsonLinesSink, "postgres": postgres.PostgresSink})
