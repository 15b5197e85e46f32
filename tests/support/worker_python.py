"""A Python for Spark's workers (``PYSPARK_PYTHON``) that behaves like a node lacking packages.

On this machine every Python sees freshview (an editable install) and its dependencies; a worker node of a
real cluster usually has neither.  The wrapper runs this interpreter with a ``sitecustomize`` that
installs an import hook first on ``sys.meta_path``:

- ``shipped_only`` packages import only from a ``.zip`` on ``sys.path`` (what ``SparkContext.addPyFile``
  ships), as on a node where they are not installed;
- ``missing`` packages do not import at all (``ModuleNotFoundError``), as on a node without them.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Sequence

SITECUSTOMIZE = '''\
import importlib.machinery
import sys

SHIPPED_ONLY = {shipped_only!r}
MISSING = {missing!r}


class _NodeWithout:
    def find_spec(self, name, path=None, target=None):
        if "." in name:
            return None  # a submodule follows its package
        if name in MISSING:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        if name in SHIPPED_ONLY:
            shipped = [p for p in sys.path if p.endswith(".zip")]
            spec = importlib.machinery.PathFinder.find_spec(name, shipped)
            if spec is None:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return spec
        return None


sys.meta_path.insert(0, _NodeWithout())
'''


def worker_python(directory: Path, shipped_only: Sequence[str] = ("freshview", "sqlglot"),
                  missing: Sequence[str] = ()) -> str:
    """Write the wrapper into ``directory``; returns its path (for ``PYSPARK_PYTHON``)."""
    site = directory / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(shipped_only=set(shipped_only),
                                                                missing=set(missing)))
    wrapper = directory / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(wrapper)
