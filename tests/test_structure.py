"""The code's shape: import contracts (pyproject.toml's [tool.importlinter], run by `lint-imports` in .ci/run
and here) and module size (a module over 800 lines says why in its docstring)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "BROKEN" not in run.stdout and "0 broken" in run.stdout


LIMIT = 800
REASON = "Longer than 800 lines because"


def test_long_modules_say_why():
    long = []
    for path in sorted((ROOT / "src" / "freshview").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > LIMIT and REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert not long, f"modules over {LIMIT} lines whose docstring does not say '{REASON} ...': {long}"
