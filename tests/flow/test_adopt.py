"""``IncrementalFlow.adopt_view``: a view computed in another flow joins this one, state and all, and then
steps exactly as if it had been registered here (checked against a flow that registered it itself)."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from freshview.errors import CatalogError
from freshview.flow import IncrementalFlow
from freshview.runtime.state import adopt

VIEW = "SELECT o.c, SUM(o.v) AS s, COUNT(*) AS n FROM o JOIN c ON o.c = c.id WHERE c.ok GROUP BY o.c"


def _rows(flow: IncrementalFlow, name: str) -> list:
    return sorted(flow.snapshot(name).to_pylist(), key=repr)


def _flows(tmp_path):
    def make(name: str) -> IncrementalFlow:
        flow = IncrementalFlow(state_dir=tmp_path / name, execution="local", first_computation="local")
        flow.register_source("c", "id INT, ok BOOLEAN", primary_key=["id"])
        return flow
    return make("main"), make("scratch"), make("reference")


def test_adopted_view_steps_like_one_registered_here(tmp_path):
    main, scratch, reference = _flows(tmp_path)
    customers = {"id": [1, 2, 3, 4], "ok": [True, False, True, None], "_weight": [1] * 4}
    orders = {"id": [1, 2, 3, 4, 5], "c": [1, 1, 2, 3, None], "v": [10, None, 5, 7, 1], "_weight": [1] * 5}
    for flow in (main, scratch, reference):
        flow.tick("c", pa.table(customers))
    for flow in (scratch, reference):
        flow.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
        flow.tick("o", pa.table(orders))
    scratch.register_view("v", VIEW)
    reference.register_view("v", VIEW)
    main.adopt_view(scratch, "v", ["o"])
    assert _rows(main, "v") == _rows(reference, "v")
    main.close()
    main = IncrementalFlow(state_dir=tmp_path / "main", execution="local")  # committed, catalog and all
    for flow in (main, reference):
        flow.tick({"o": pa.table({"id": [6, 1], "c": [3, 1], "v": [1, 10], "_weight": [1, -1]}),
                   "c": pa.table({"id": [2, 2], "ok": [False, True], "_weight": [-1, 1]})})
    assert _rows(main, "v") == _rows(reference, "v") != []
    assert _rows(main, "o") == _rows(reference, "o")


def test_refused_when_a_source_it_reads_differs(tmp_path):
    main, scratch, _ = _flows(tmp_path)
    scratch.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    main.register_source("o", "id INT, c INT", primary_key=["id"])
    scratch.register_view("v", VIEW)
    with pytest.raises(CatalogError, match="does not hold as it was read"):
        main.adopt_view(scratch, "v")
    assert "v" not in main.views


# ---------------------------------------------------------------------- O(files), and crash safety
class _Killed(BaseException):
    """The process dies here (nothing after it runs; what is on disk stays as it is)."""


def _populated(tmp_path):
    """``main`` (customers only), ``scratch`` with the view over orders computed and settled (its runs in
    files), ``reference`` with the same view registered itself."""
    main, scratch, reference = _flows(tmp_path)
    customers = {"id": list(range(40)), "ok": [i % 3 != 0 for i in range(40)], "_weight": [1] * 40}
    orders = {"id": list(range(300)), "c": [i % 41 if i % 7 else None for i in range(300)],
              "v": [i % 13 if i % 5 else None for i in range(300)], "_weight": [1] * 300}
    for flow in (main, scratch, reference):
        flow.tick("c", pa.table(customers))
    for flow in (scratch, reference):
        flow.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
        flow.tick("o", pa.table(orders))
    scratch.register_view("v", VIEW)
    reference.register_view("v", VIEW)
    adopt.settle(scratch.store)
    scratch.tick("o", pa.table({"id": [300], "c": [1], "v": [4], "_weight": [1]}))  # (a run only in memory)
    reference.tick("o", pa.table({"id": [300], "c": [1], "v": [4], "_weight": [1]}))
    return main, scratch, reference


def _run_files(flow: IncrementalFlow) -> set[str]:
    runs = flow.store.directory / "runs"
    return {p.name for p in runs.iterdir()} if runs.exists() else set()


def test_adoption_links_the_run_files_and_copies_no_row(tmp_path):
    main, scratch, reference = _populated(tmp_path)
    theirs = {(p.stat().st_ino) for p in (scratch.store.directory / "runs").iterdir()}
    names = [n for n in scratch.store.list_arrangements() if n not in main.store.list_arrangements()]
    main.store.begin()
    adopted = adopt.adopt_arrangements(scratch.store, main.store, names)
    main.store.commit()
    assert adopted.arrangements == len(names) and adopted.files >= len(names) - 1 and adopted.memory_runs >= 1
    ours = {main.store.directory / r.path for n in names for r in main.store.committed_runs(n)[1] if r.path}
    assert len(ours) >= adopted.files and {p.stat().st_ino for p in ours} <= theirs  # the same files, linked
    for name in names:
        assert main.store.scan(name).sort_by([(c, "ascending") for c in main.store.scan(name).column_names]) \
            .equals(scratch.store.scan(name).sort_by([(c, "ascending") for c in scratch.store.scan(name).column_names]))


@pytest.mark.parametrize("kill", ["before the commit", "after the commit"])
def test_a_kill_mid_join_leaves_the_store_as_before_or_joined_and_equal(tmp_path, kill, monkeypatch):
    main, scratch, reference = _populated(tmp_path)
    before = _run_files(main)
    store = main.store
    if kill == "before the commit":  # the links are made: the log record is what is lost
        def append(record, sync):
            raise _Killed()
        monkeypatch.setattr(store._files, "append", append)
        with pytest.raises(_Killed):
            main.adopt_view(scratch, "v", ["o"])
        assert _run_files(main) - before  # (the links were there when it died)
    else:  # committed, then killed before any checkpoint: the log holds the join
        main.adopt_view(scratch, "v", ["o"])
    store._release()  # the process is gone: no rollback reaches the disk, no checkpoint
    monkeypatch.undo()
    main = IncrementalFlow(state_dir=tmp_path / "main", execution="local")
    if kill == "before the commit":
        assert main.views == [] and main.sources == ["c"]
        assert _run_files(main) == before  # the stray links went at the open
        main.adopt_view(scratch, "v", ["o"])  # the population joins again (its scratch state is intact)
    scratch.close()
    shutil.rmtree(tmp_path / "scratch")  # (the population's directory goes: the links stay)
    assert _rows(main, "v") == _rows(reference, "v") != []
    for flow in (main, reference):
        flow.tick({"o": pa.table({"id": [7, 1, 301], "c": [None, 1, None], "v": [7, 1, 2], "_weight": [-1, -1, 1]}),
                   "c": pa.table({"id": [3, 3], "ok": [False, True], "_weight": [-1, 1]})})
    assert _rows(main, "v") == _rows(reference, "v") != []
    main.close()
    main = IncrementalFlow(state_dir=tmp_path / "main", execution="local")  # checkpointed and reopened
    assert _rows(main, "v") == _rows(reference, "v")
    assert _rows(main, "o") == _rows(reference, "o")


# ---------------------------------------------------------------------- a source's copy taken as pinned
def _orders(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "c": [i % 41 if i % 7 else None for i in ids],
                     "v": [i % 13 if i % 5 else None for i in ids], "_weight": [1] * n})


def _gone(i: int) -> pa.Table:
    """The delete of order ``i`` as ``_orders`` made it."""
    row = _orders(1, start=i)
    return row.set_column(3, "_weight", pa.array([-1], pa.int64()))


def test_a_pinned_source_copy_is_taken_by_linking_its_files_and_steps_like_a_loaded_one(tmp_path):
    main, scratch, reference = _flows(tmp_path)
    main.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    main.load_source("o", [_orders(3000)])
    main.tick("o", _orders(5, start=3000))  # (a run held in memory)
    adopt.settle(main.store)
    main.tick("o", pa.concat_tables([_gone(1), pa.table({"id": [3005], "c": [2], "v": [1], "_weight": [1]})]))
    pinned = main.pin_source("o")
    expected = _rows(main, "o")
    # the main flow goes on: new runs, merges, a checkpoint that deletes the pinned files it no longer needs
    for i in range(6):
        main.tick("o", _gone(10 + i))
    adopt.settle(main.store)
    scratch.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    theirs = {p.stat().st_ino for p in (main.store.directory / "runs").iterdir()} | \
        {(main.store.directory / r.path).stat().st_ino for r in pinned.runs
         if r.path and (main.store.directory / r.path).exists()}
    assert scratch.adopt_source("o", pinned) == pinned.rows
    assert _rows(scratch, "o") == expected
    linked = {(scratch.store.directory / r.path).stat().st_ino for r in scratch.store.committed_runs("source/o")[1]
              if r.path}
    assert linked and linked <= theirs  # the same files, no row written
    # it steps like a copy loaded row by row: a view over it, then changes, equal to a reference
    reference.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    reference.tick("o", pa.table({"id": [r["id"] for r in expected], "c": [r["c"] for r in expected],
                                  "v": [r["v"] for r in expected], "_weight": [1] * len(expected)}))
    for flow in (scratch, reference):
        flow.tick("c", pa.table({"id": list(range(41)), "ok": [i % 3 != 0 for i in range(41)], "_weight": [1] * 41}))
        flow.register_view("v", VIEW)
        flow.tick({"o": pa.concat_tables([_gone(2), pa.table({"id": [1, 3005], "c": [3, 2], "v": [5, 1],
                                                             "_weight": [1, -1]})])})
    assert _rows(scratch, "v") == _rows(reference, "v") != []
    main.close()
    scratch.close()
    scratch = IncrementalFlow(state_dir=tmp_path / "scratch", execution="local")  # its links survive a reopen
    assert _rows(scratch, "v") == _rows(reference, "v")


def test_a_copy_kept_otherwise_is_refused_and_loaded_row_by_row_by_the_service(tmp_path):
    from freshview.errors import StateError
    from freshview.service import loading

    main, scratch, _ = _flows(tmp_path)
    main.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    main.tick("o", _orders(50))
    pinned = main.pin_source("o")
    scratch.register_source("o", "id INT, c INT, v INT")  # no primary key: another layout
    with pytest.raises(StateError, match="kept otherwise"):
        scratch.adopt_source("o", pinned)
    assert loading.take(scratch, "o", pinned) == 50
    assert _rows(scratch, "o") == _rows(main, "o")
    scratch.register_view("v", VIEW)
    with pytest.raises(StateError, match="views read it"):  # (a copy views read takes changes, not copies)
        scratch.adopt_source("o", pinned)
