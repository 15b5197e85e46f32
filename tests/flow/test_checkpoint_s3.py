"""Checkpoints to object storage, against a real S3 protocol server on loopback (moto's server mode).

A full checkpoint, deltas, and a restore on a fresh flow round-trip through ``s3://`` with the endpoint
and credentials given as ``storage_options``, as environment variables (``AWS_ENDPOINT_URL`` ...) and
in the URI's query; multipart uploads work too (``allow_delayed_open=False``); a missing bucket or an
empty prefix is a clear error.  ``s3_options``' precedence rules are checked without a server, and an
fsspec URI (``memory://``) round-trips where fsspec is installed.

moto 5.2.0 and 5.2.1 answered CompleteMultipartUpload with a ``CompleteMultipartUploadResponse`` root
element where S3 (and Arrow's check of the response body) has ``CompleteMultipartUploadResult``, so
every multipart upload from pyarrow failed with ``INTERNAL_FAILURE``; fixed in moto 5.2.2, which the
``test`` extra requires.
"""

from __future__ import annotations

import decimal
import random
from typing import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from freshview import IncrementalFlow
from freshview.errors import StateError
from freshview.flow import checkpoint as ckpt
from tests.flow.test_checkpoint import Stream, build, same

BUCKET = "freshview-checkpoints"


@pytest.fixture(scope="module")
def s3() -> Iterator[dict]:
    """A moto S3 server on a free loopback port with one bucket: the ``storage_options`` to reach it."""
    moto = pytest.importorskip("moto")
    from moto.server import ThreadedMotoServer

    version = tuple(int(p) for p in moto.__version__.split(".")[:3] if p.isdigit())
    if (5, 2, 0) <= version < (5, 2, 2):
        pytest.fail(f"moto {moto.__version__} breaks multipart uploads (a wrong CompleteMultipartUpload "
                    "response): pip install 'moto[server]>=5.2.2'")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"endpoint_override": f"http://{host}:{port}", "access_key": "testing", "secret_key": "testing",
               "region": "us-east-1"}
    try:
        pafs.S3FileSystem(**options, allow_bucket_creation=True).create_dir(BUCKET)
        yield options
    finally:
        server.stop()


def keys(options: dict, prefix: str) -> list[str]:
    """The object keys under ``prefix`` in the bucket (directory markers left out)."""
    fs = pafs.S3FileSystem(**options)
    infos = fs.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True))
    return sorted(i.path[len(BUCKET) + 1:] for i in infos if i.type == pafs.FileType.File)


def test_full_deltas_and_restore_on_a_fresh_flow_round_trip_through_s3(make_flow, s3):
    uri = f"s3://{BUCKET}/orders-flow/"
    original, reference = build(make_flow), build(make_flow)
    stream = Stream(21)
    batches = [stream.step() for _ in range(16)]
    for i, batch in enumerate(batches[:10]):
        for flow in (original, reference):
            flow.tick(batch)
        if i == 3:
            info = original.checkpoint_full(uri, storage_options=s3)
            assert info.kind == "full" and info.checkpoint == 1 and info.step == 4 and info.files > 0
            full_files = info.files
        elif i > 3:
            info = original.checkpoint(uri, storage_options=s3)
            assert info.kind == "delta" and info.checkpoint == i - 2 and info.step == i + 1
            assert info.files < full_files + 10  # only what the bucket lacks
    original.set_meta("position", "0/16B3748")
    last = original.checkpoint(uri, storage_options=s3)
    assert last.files == 0  # nothing changed since the previous one
    stored = keys(s3, "orders-flow")
    assert "orders-flow/LATEST" in stored and f"orders-flow/checkpoints/{last.checkpoint:08d}.json" in stored
    assert sum(k.startswith("orders-flow/runs/") for k in stored) >= full_files

    restored = make_flow(execution="local")  # a fresh flow: nothing registered
    info = restored.restore(uri, storage_options=s3)
    assert info.checkpoint == last.checkpoint and info.step == 10 and info.files > 0
    assert restored.get_meta("position") == "0/16B3748"
    same(restored, original)
    for batch in batches[10:]:
        for flow in (original, reference, restored):
            flow.tick(batch)
    same(restored, original)
    same(restored, reference)
    # The restored flow checkpoints on: a delta chained on the chain it came from.
    assert restored.checkpoint(uri, storage_options=s3).checkpoint == last.checkpoint + 1


def orders_flow(tmp_path, name: str, **source) -> IncrementalFlow:
    flow = IncrementalFlow(state_dir=tmp_path / name, execution="local")
    flow.register_source("orders", "o_id INT, amount NUMERIC(10,2)", primary_key=["o_id"], **source)
    return flow


def orders(ids: list[int], weight: int = 1) -> pa.Table:
    return pa.table({"o_id": pa.array(ids, pa.int32()),
                     "amount": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
                     "_weight": pa.array([weight] * len(ids), pa.int64())})


def test_endpoint_and_credentials_from_the_environment_or_the_uri(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["endpoint_override"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with orders_flow(tmp_path, "a") as flow:
        flow.tick("orders", orders([1, 2, 3]))
        flow.checkpoint(f"s3://{BUCKET}/from-env")
        flow.tick("orders", orders([4]))
        assert flow.checkpoint(f"s3://{BUCKET}/from-env").kind == "delta"
    with IncrementalFlow(state_dir=tmp_path / "b", execution="local") as fresh:
        assert fresh.restore(f"s3://{BUCKET}/from-env").step == 2
        assert sorted(fresh.snapshot("orders").column("o_id").to_pylist()) == [1, 2, 3, 4]
    # The endpoint in the URI's query (pyarrow's from_uri spelling); credentials still from the environment.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    host_port = s3["endpoint_override"].removeprefix("http://")
    with IncrementalFlow(state_dir=tmp_path / "c", execution="local") as fresh:
        info = fresh.restore(f"s3://{BUCKET}/from-env?endpoint_override={host_port}&scheme=http")
        assert info.step == 2 and fresh.snapshot("orders").num_rows == 4


def test_multipart_uploads_and_the_dedup_seen_set_round_trip(s3, tmp_path):
    """``allow_delayed_open=False``: every file goes up as a multipart upload (what failed on moto 5.2.1)."""
    options = {**s3, "allow_delayed_open": False}
    uri = f"s3://{BUCKET}/multipart/"
    with orders_flow(tmp_path, "a", dedup=True) as flow:
        for i in range(5):
            flow.tick("orders", orders([10 * i, 10 * i + 1]))
            flow.checkpoint(uri, storage_options=options)
        metrics = flow.metrics()
    with IncrementalFlow(state_dir=tmp_path / "b", execution="local") as fresh:
        assert fresh.restore(uri, storage_options=options).checkpoint == 5
        assert fresh.metrics() == metrics
        assert fresh.tick("orders", orders([31, 30])).deduplicated == ["orders"]  # a re-delivery, still seen
        assert fresh.snapshot("orders").num_rows == 10


def test_a_missing_bucket_or_an_empty_prefix_is_a_clear_error(s3, tmp_path):
    with orders_flow(tmp_path, "a") as flow:
        flow.tick("orders", orders([1]))
        with pytest.raises(StateError, match="cannot write a checkpoint to 's3://no-such-bucket/x'"):
            flow.checkpoint("s3://no-such-bucket/x", storage_options=s3)
        with pytest.raises(StateError, match="no checkpoint at"):
            flow.restore(f"s3://{BUCKET}/nothing-here", storage_options=s3)
        with pytest.raises(StateError, match="storage_options apply to a URI"):
            flow.checkpoint(str(tmp_path / "local"), storage_options=s3)
        assert flow.snapshot("orders").num_rows == 1


def test_s3_options_precedence_and_spellings():
    env = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_ENDPOINT_URL_S3": "http://env-s3:2"}
    options, path = ckpt.s3_options("s3://bucket/a/b/", environ=env)
    assert path == "bucket/a/b" and options == {"endpoint_override": "http://env-s3:2", "allow_delayed_open": True}
    options, path = ckpt.s3_options("s3://bucket?endpoint_override=q:3&scheme=http&allow_bucket_creation=true"
                                    "&request_timeout=2.5", environ={"AWS_ENDPOINT_URL": "http://env:1"})
    assert path == "bucket" and options["endpoint_override"] == "q:3" and options["scheme"] == "http"
    assert options["allow_bucket_creation"] is True and options["request_timeout"] == 2.5
    options, _ = ckpt.s3_options("s3://k%2Fx:s3cr%40t@bucket/p?endpoint_override=q:3",
                                 {"endpoint_url": "http://opt:4", "allow_delayed_open": False, "region_name": "r"},
                                 environ=env)
    assert options == {"endpoint_override": "http://opt:4", "access_key": "k/x", "secret_key": "s3cr@t",
                       "allow_delayed_open": False, "region": "r"}
    options, _ = ckpt.s3_options("s3://b/p", {"key": "K", "secret": "S", "token": "T"}, environ={})
    assert (options["access_key"], options["secret_key"], options["session_token"]) == ("K", "S", "T")
    with pytest.raises(ValueError):
        ckpt.s3_options("s3:///no-bucket", environ={})


def test_an_fsspec_uri_round_trips(tmp_path):
    pytest.importorskip("fsspec")
    uri = f"memory://freshview-test-{random.randrange(10**9)}/ckpt"
    with orders_flow(tmp_path, "a") as flow:
        flow.tick("orders", orders([1, 2]))
        flow.checkpoint(uri)
        flow.tick("orders", orders([2], -1))
        assert flow.checkpoint(uri).kind == "delta"
    with IncrementalFlow(state_dir=tmp_path / "b", execution="local") as fresh:
        assert fresh.restore(uri).step == 2
        assert fresh.snapshot("orders").column("o_id").to_pylist() == [1]
