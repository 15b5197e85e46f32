"""Fixtures for end-to-end service tests: a fresh database each, services that are always stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support.service import ThreadedService


@pytest.fixture
def start_service(spark: Any, database: str, tmp_path: Path) -> Iterator[Callable[..., ThreadedService]]:
    """``start_service(**Service kwargs)`` runs a service on ``database`` with state under tmp_path."""
    running: list[ThreadedService] = []

    def start(state_dir: Path | None = None, **kwargs: Any) -> ThreadedService:
        svc = ThreadedService(database, state_dir or tmp_path / "state", spark, **kwargs)
        running.append(svc)
        return svc

    yield start
    for svc in running:
        if svc.thread.is_alive():
            svc.stop()
