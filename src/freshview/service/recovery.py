"""Repairs at start-up and when the stream's position is lost.

A lost position (slot invalidated or dropped, binlog purged), a lost or
unreadable state directory, or engine state ahead of the database all lead to
one remedy: wipe the engine's state, mark the views ``rebuilding``, rebuild
each from a new snapshot.  The decisions here are pure; ``Core`` does the I/O.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Collection, Sequence

from freshview.connectors.base import Attached, after

AHEAD = "the engine state is ahead of the database (restored from a backup?)"
LOST_STATE = "the engine's state of this view is lost: it is rebuilt from a new snapshot"


def rebuild_reason(attached: Attached, engine_at: Any, results_at: Any) -> str | None:
    """Why every view must be rebuilt from a new snapshot, or None when the engine can resume."""
    if attached.lost:
        return attached.lost
    if after(engine_at, results_at):
        return AHEAD
    return None


def wanted_views(rows: Sequence[tuple[str, str, str]]) -> dict[str, str]:
    """The views the service keeps (name -> SQL), in creation order: active ones and those being rebuilt."""
    return {name: sql for name, sql, status in rows if status in ("active", "rebuilding")}


def half_swapped(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """Views being rebuilt: a service that died between a view's engine state and its result table (a
    rebuild or an ``alter_view`` joining: ``ViewCatalog.join``) may have left either definition in the
    engine, so whatever the engine has of them is computed again from the stored SQL."""
    return [name for name, _, status in rows if status == "rebuilding"]


def still_active(rows: Sequence[tuple[str, str, str]], rebuilt: Collection[str]) -> list[str]:
    """Of the views to rebuild, those ``freshview.views`` still shows active (their state alone was lost)."""
    return [name for name, _, status in rows if status == "active" and name in rebuilt]


def views_to_drop(engine_views: Sequence[str], wanted: set[str]) -> list[str]:
    """Engine views nobody wants any more, readers first (``engine_views`` in registration order)."""
    return [view for view in reversed(engine_views) if view not in wanted]


def wipe_state(state_dir: Path) -> None:
    if state_dir.exists():
        for entry in state_dir.iterdir():
            if entry.name == "freshview.log":  # the CLI's log (cli/logs.py), not state
                continue
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
