"""A small file system of the test's own, to fill up: a tmpfs mounted on a temporary directory.

Mounting needs root (CAP_SYS_ADMIN); without it the test is skipped, saying so.  ``fill`` takes every
free byte with a filler file (returned: delete it and the space is back).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def small_disk(where: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``where`` (created), unmounted afterwards; skips the test when it
    cannot be mounted (not root, or no mount privilege in this container)."""
    if os.geteuid() != 0:
        pytest.skip("filling a disk needs a small tmpfs of the test's own, and mounting one needs root")
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill ({proc.stderr.strip() or proc.returncode}): needs CAP_SYS_ADMIN")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(directory: Path, name: str = "filler") -> Path:
    """Write a file taking every byte left on ``directory``'s file system; returns it."""
    path = directory / name
    chunk = b"\0" * (64 << 10)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                if os.write(fd, chunk) < len(chunk):
                    chunk = chunk[:max(1, len(chunk) // 2)]
            except OSError:
                if len(chunk) == 1:
                    break
                chunk = chunk[:len(chunk) // 2]
    finally:
        os.close(fd)
    return path
