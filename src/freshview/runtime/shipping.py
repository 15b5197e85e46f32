"""freshview's own code to a cluster's executors, and one check that they can run it.

Only a ``PartitionedIncrementalFlow`` runs freshview's Python on executors (each shard's step is a Spark
task that opens an ``IncrementalFlow``); an ``IncrementalFlow``'s Spark steps are SQL the JVM runs, so
its executors need nothing of freshview.  ``ship(session)``, once per ``SparkContext`` (a local master
too: its Python workers are processes of their own, maybe of another ``PYSPARK_PYTHON``, and then run
exactly the driver's code):

1. zips freshview's installed package and the pure-Python packages it imports on executors (``sqlglot``)
   into ``<tmp>/freshview-pyfiles/freshview-<content hash>.zip`` (kept: the same code is zipped once),
   sources plus bytecode of this Python (unchecked-hash ``.pyc``, so workers do not compile sqlglot;
   an executor on another Python compiles the sources), and adds it with ``SparkContext.addPyFile``:
   executors put it first on their Python path, ahead of anything installed there;
2. runs one tiny job in which executors' Pythons import freshview's compiled dependencies (pyarrow,
   numpy: Spark's own, freshview does not ship them) and freshview from the zip and report what they
   found; ``verdict`` (pure) turns the reports into ``None`` or a message saying what to install where,
   raised as ``ExecutorEnvironmentError``.  The minimum versions are freshview's declared requirements.

A package with compiled extension modules cannot be imported from a zip: such a package is not shipped
but checked like pyarrow (it must be installed on the nodes).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import py_compile
import re
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from freshview.errors import ExecutorEnvironmentError

COMPILED = ("pyarrow", "numpy")  # installed on the nodes (PySpark's own Arrow dependencies)
SHIPPABLE = ("freshview", "sqlglot")  # zipped from the driver's installation when pure Python
ENTRY = "freshview.flow.partitioned"  # what an executor imports to run a shard: every module it needs
CACHE = Path(tempfile.gettempdir()) / "freshview-pyfiles"

_lock = threading.Lock()
_shipped: dict[str, str] = {}  # SparkContext applicationId -> the zip's name, once checked


# ----------------------------------------------------------------------------------------- pure rules
def minimum_versions(requirements: Iterable[str], names: Iterable[str]) -> dict[str, str]:
    """``{"pyarrow": "15"}`` from requirement strings such as ``pyarrow>=15`` (markers, extras ignored)."""
    wanted = {n.lower() for n in names}
    out: dict[str, str] = {}
    for req in requirements:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*(?:\(?\s*)>=\s*([0-9][^,;)\s]*)", req)
        if m and m.group(1).lower() in wanted and "extra ==" not in req:
            out[m.group(1).lower()] = m.group(2)
    return out


def version_tuple(version: str) -> tuple[int, ...]:
    """The release numbers of a version (``"15.0.2"`` -> (15, 0, 2); ``"2.1.0rc1"`` -> (2, 1, 0))."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", version or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()


def _requirement(name: str, minimums: Mapping[str, str]) -> str:
    return f"{name}>={minimums[name]}" if name in minimums else name


def verdict(reports: Sequence[Mapping[str, Any]], installed: Sequence[str], shipped: Sequence[str],
            minimums: Mapping[str, str], zip_name: str | None) -> str | None:
    """What the executors' reports say is wrong, as a message naming what to install where; None: all is well.

    A report (``probe``) is ``{"host", "python", "modules": {name: {"version", "file"} | {"error"}}}``;
    ``installed`` must be importable there at ``minimums`` or newer, ``shipped`` must import from ``zip_name``.
    """
    problems: dict[tuple, tuple[str, set[str]]] = {}  # (kind, name, python) -> (message, hosts)

    def problem(key: tuple, message: str, report: Mapping[str, Any]) -> None:
        problems.setdefault(key, (message, set()))[1].add(str(report.get("host", "?")))

    fix = "or set spark.pyspark.python (PYSPARK_PYTHON) to a Python that has it"
    for report in reports:
        python = report.get("python", "?")
        modules = report.get("modules", {})
        lacking = False
        for name in installed:
            found = modules.get(name, {"error": "not checked"})
            req = _requirement(name, minimums)
            if "error" in found:
                lacking = True
                problem(("missing", name, python),
                        f"the executors' Python ({python}) lacks {req} ({found['error']}): install it on every "
                        f"worker node (pip install '{req}') {fix}", report)
            elif name in minimums and version_tuple(found.get("version") or "") < version_tuple(minimums[name]):
                lacking = True
                problem(("old", name, python),
                        f"the executors' Python ({python}) has {name} {found.get('version')}; freshview needs "
                        f"{req}: upgrade it on every worker node (pip install --upgrade '{req}') {fix}", report)
        if lacking:
            continue  # the shipped code would fail to import for that reason: said once
        for name in shipped:
            found = modules.get(name, {"error": "not checked"})
            if "error" in found:
                problem(("shipped", name, python),
                        f"the executors' Python ({python}) cannot import {name}, shipped with the job as "
                        f"{zip_name}: {found['error']}", report)
            elif zip_name and zip_name not in (found.get("file") or ""):
                problem(("shadowed", name, python),
                        f"the executors' Python ({python}) imports {name} from {found.get('file')}, not from "
                        f"{zip_name} shipped with the job: remove that copy from the executors' Python path",
                        report)
    if not problems:
        return None
    return "\n".join(f"{message} [executors on {', '.join(sorted(hosts))}]" for message, hosts in problems.values())


# ----------------------------------------------------------------------------------------- the zip
def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo"))


def is_pure(root: Path) -> bool:
    """No compiled extension module in the package (those cannot be imported from a zip)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES) + (".so", ".pyd")
    return not any(p.name.endswith(suffixes) for p in _files(root))


def build_zip(packages: Mapping[str, Path], cache: Path = CACHE) -> Path:
    """``packages`` (top-level name -> directory) as ``freshview-<hash>.zip`` in ``cache``, built once per content."""
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    listing = []
    for name in sorted(packages):
        for path in _files(packages[name]):
            arc = f"{name}/{path.relative_to(packages[name]).as_posix()}"
            data = path.read_bytes()
            digest.update(arc.encode() + b"\0" + hashlib.sha256(data).digest())
            listing.append((arc, path))
    target = cache / f"freshview-{digest.hexdigest()[:20]}.zip"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        partial = Path(work) / target.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for arc, path in listing:
                zf.write(path, arc)
                if arc.endswith(".py"):
                    compiled = Path(work) / "c.pyc"
                    try:
                        py_compile.compile(str(path), cfile=str(compiled), dfile=arc, doraise=True,
                                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
                    except py_compile.PyCompileError:
                        continue  # the source goes; an executor reports its error when importing it
                    zf.write(compiled, arc[:-3] + ".pyc")
        os.replace(partial, target)
    return target


# ----------------------------------------------------------------------------------------- the check
def _probe_function(names: Sequence[str]):
    """A function for executors: import ``names``, report versions and files.  Defined inside a function so
    cloudpickle ships it by value: it runs where freshview itself cannot be imported."""

    def probe(_index: int) -> dict:
        import importlib as il
        import socket
        import sys as s

        report: dict = {"host": socket.gethostname(), "python": s.executable, "modules": {}}
        for name in names:
            try:
                module = il.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - reported, whatever it is
                report["modules"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            else:
                top = s.modules.get(name.partition(".")[0], module)
                report["modules"][name] = {"version": getattr(top, "__version__", None),
                                           "file": getattr(module, "__file__", None) or ""}
        return report
    return probe


def _declared_minimums() -> dict[str, str]:
    try:
        return minimum_versions(importlib.metadata.requires("freshview") or (), COMPILED)
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return {}


def _first_error_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    for line in lines:
        if ("Error:" in line or "Exception:" in line) and "py4j" not in line:
            return line.strip()
    return lines[0] if lines else type(exc).__name__


def ship(session: Any) -> str:
    """Ship freshview to ``session``'s executors and check they can run it (module docstring).

    Returns the shipped zip's name; ``ExecutorEnvironmentError`` says what to install where.  Once per
    SparkContext; a failed check is made again next time."""
    sc = session.sparkContext
    with _lock:
        app = sc.applicationId
        if app in _shipped:
            return _shipped[app]
        packages: dict[str, Path] = {}
        installed = list(COMPILED)
        for name in SHIPPABLE:
            root = _package_dir(name)
            if root is not None and is_pure(root):
                packages[name] = root
            else:
                installed.append(name)
        path = build_zip(packages)
        before = list(sys.path)
        sc.addPyFile(str(path))
        sys.path[:] = [p for p in sys.path if p in before]  # the driver keeps running its installed copy
        shipped = [ENTRY if n == "freshview" else n for n in packages]
        tasks = max(1, min(sc.defaultParallelism, 64))
        try:
            reports = sc.parallelize(range(tasks), tasks).map(_probe_function(installed + shipped)).collect()
        except Exception as exc:  # py4j / Spark: the executors' Python could not even run the check
            raise ExecutorEnvironmentError(
                f"the executors' Python could not run freshview's check ({_first_error_line(exc)}); the worker "
                f"nodes need Python {sys.version_info.major}.{sys.version_info.minor} (as the driver) with "
                f"{', '.join(_requirement(n, _declared_minimums()) for n in COMPILED)}, or spark.pyspark.python "
                "set to such a Python") from None
        message = verdict(reports, installed, shipped, _declared_minimums(), path.name)
        if message is not None:
            raise ExecutorEnvironmentError(message)
        _shipped[app] = path.name
        return path.name
