"""Pipelines over message brokers: a SQL file of sources, views and sinks run by ``freshview pipeline run``.

``spec`` reads the file; ``batching`` and ``outbox`` hold the pure decisions (which messages form a step,
what to re-deliver after a crash); ``io`` is the connector interface and ``nats``, ``jsonl`` and
``postgres`` implement it; ``runner`` drives an ``IncrementalFlow`` with them.
"""

from freshview.pipeline.spec import PipelineError, PipelineSpec, parse_pipeline

__all__ = ["PipelineError", "PipelineSpec", "parse_pipeline"]
