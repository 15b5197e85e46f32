"""Requests that fail or kill the service (``service.requests``), decided without a database."""

from __future__ import annotations

from freshview.connectors.base import Request
from freshview.errors import SqlError
from freshview.service import populating, requests


def test_a_request_that_stopped_the_service_is_retried_once_then_failed():
    assert requests.after_crash(0) is None  # running before attempts were counted (an upgraded schema)
    assert requests.after_crash(1) is None
    assert requests.after_crash(2) == "freshview: this request stopped the service; not retried"
    assert requests.after_crash(3) == requests.NOT_RETRIED


class Queue:
    """The interrupted requests of a ``ControlSchema``, and what became of them."""

    def __init__(self, *attempts: int) -> None:
        self.running = [Request(i, "create", f"public.v{i}", "SELECT 1", None, a) for i, a in enumerate(attempts)]
        self.requeued: list[int] = []
        self.failed: dict[int, str | None] = {}

    def interrupted_requests(self) -> list[Request]:
        return self.running

    def requeue_request(self, request_id: int) -> None:
        self.requeued.append(request_id)

    def finish_request(self, request_id: int, error: str | None = None) -> None:
        self.failed[request_id] = error


def test_recover_requeues_first_crashes_and_fails_second_ones():
    queue = Queue(1, 2, 1, 5)
    requests.recover(queue)  # type: ignore[arg-type]
    assert queue.requeued == [0, 2]
    assert queue.failed == {1: requests.NOT_RETRIED, 3: requests.NOT_RETRIED}


def test_a_refusal_keeps_its_message_and_an_internal_error_is_one_line():
    create = Request(7, "create", "public.v", "SELECT FROM t")
    expected = (SqlError,)
    assert requests.failure(create, SqlError("bad thing"), expected) == "freshview: bad thing"
    assert requests.failure(create, SqlError("freshview: said"), expected) == "freshview: said"
    text = requests.failure(create, IndexError("tuple index out of range\nmore"), expected)
    assert text == ("freshview: creating view public.v failed with an internal error (IndexError: tuple index out "
                    "of range); the service's log has the details")
    drop = Request(8, "drop", "public.v", None)
    assert "\n" not in requests.failure(drop, KeyError(), expected)
    assert requests.failure(drop, KeyError(), expected).startswith("freshview: dropping view public.v failed")


class Views:
    """A ``ViewCatalog`` as ``requests.serve`` sees it: ``populate`` plans a view, or makes it wait while
    ``busy`` names it."""

    class Names:
        @staticmethod
        def qualify(name: str) -> str:
            return name if "." in name else f"public.{name}"

    def __init__(self, *queued: Request) -> None:
        self.queue = list(queued)
        self.busy: set[str] = set()
        self.calls: list[tuple] = []
        self.answers: dict[int, str | None] = {}
        self.errors = (SqlError,)
        self.names = self.Names()
        self.connector = self
        self.control = self

    def next_request(self) -> Request | None:
        return self.queue.pop(0) if self.queue else None

    def finish_request(self, request_id: int, error: str | None = None) -> None:
        self.answers[request_id] = error

    def populate(self, name: str, sql: str, position, *, request, reader, blocking, processed, admitted):
        self.calls.append(("populate", name, admitted))
        if name in self.busy:
            raise populating.MustWait(f"{name} waits")
        return f"plan {name}"

    def drop(self, name: str, request=None, requested_by=None) -> None:
        self.calls.append(("drop", name))


def test_a_create_that_must_wait_is_held_and_tried_again_first_and_a_drop_answers_it():
    views = Views(Request(1, "create", "public.a", "SELECT 1"), Request(2, "create", "public.b", "SELECT 1"),
                  Request(3, "create", "public.c", "SELECT 1"))
    views.busy = {"public.b", "public.c"}
    held: list[Request] = []
    plans = requests.serve(views, None, lambda: False, held=held)  # type: ignore[arg-type]
    assert plans == ["plan public.a"] and [r.id for r in held] == [2, 3]  # requests go on past a held one
    views.busy = {"public.c"}
    views.queue = [Request(4, "drop", "c", None), Request(5, "create", "public.d", "SELECT 1")]
    cancelled: list[str] = []
    views.calls = []
    plans = requests.serve(views, None, lambda: False, held=held, cancel=cancelled.append)  # type: ignore[arg-type]
    assert plans == ["plan public.b", "plan public.d"]
    assert views.calls == [("populate", "public.b", True), ("populate", "public.c", True), ("drop", "c"),
                           ("populate", "public.d", False)]  # held ones first, admitted already
    assert held == [] and cancelled == ["public.c"]
    assert views.answers == {3: "freshview: view public.c was dropped before it was created"}
