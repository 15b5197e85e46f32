"""Requests that fail or kill the service (``service.requests``), decided without a database."""

from __future__ import annotations

from freshview.connectors.base import Request
from freshview.errors import SqlError
from freshview.service import requests


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
