"""``create_view`` / ``alter_view`` / ``drop_view`` / ``verify_view`` requests: served between steps, from the control schema's queue
(what a create or drop does is ``ViewCatalog``'s).

No request, however malformed, stops the service: every failure of one is
caught, answered to its CALL with a message and recorded in the queue
(``finish_request``); an unexpected one (a bug, not a refusal) is answered
in one line and its traceback goes to the log only.  Only what is not an
``Exception`` (``KeyboardInterrupt``, ``SystemExit``) goes through, and the
request goes back to the queue.

A request that kills the process itself (the first computation of a view
running out of memory, a crash in native code) cannot be caught: it is
counted instead.  Claiming a request counts an attempt, durably, before any
work on it; at start, the requests a dead service was working on are
retried once and then failed (``after_crash``, ``recover``).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Callable

from freshview.connectors.base import ControlSchema, Request
from freshview.errors import Fault
from freshview.service.populating import MustWait

if TYPE_CHECKING:
    from freshview.service.catalog import ViewCatalog
    from freshview.service.population import Plan

log = logging.getLogger("freshview.service")

NOT_RETRIED = "freshview: this request stopped the service; not retried"
MAX_ATTEMPTS = 2  # a request that was running when the service died is retried at most once


def after_crash(attempts: int) -> str | None:
    """A request found running at start (the service died working on it ``attempts`` times): None to
    retry it, or the error to fail it with."""
    return None if attempts < MAX_ATTEMPTS else NOT_RETRIED


def recover(control: ControlSchema) -> None:
    """At start: the requests a dead service was working on are retried once, then failed."""
    for request in control.interrupted_requests():
        error = after_crash(request.attempts)
        if error is None:
            log.warning("request %s (%s %s) was running when the service stopped; retrying it once",
                        request.id, request.action, request.name)
            control.requeue_request(request.id)
        else:
            log.error("request %s (%s %s) was running each of the %d times the service stopped; failing it",
                      request.id, request.action, request.name, request.attempts)
            control.finish_request(request.id, error)


def failure(request: Request, exc: BaseException, expected: tuple[type[BaseException], ...]) -> str:
    """The answer to a request that failed with ``exc``: a refusal's own message, or one line naming
    what failed for anything else (an internal error: its traceback is logged, not sent)."""
    return failure_text(request.action, request.name, exc, expected)


def failure_text(action: str, name: str, exc: BaseException, expected: tuple[type[BaseException], ...]) -> str:
    """``failure`` for a ``create``, ``alter``, ``verify`` or ``drop`` of view ``name``."""
    if isinstance(exc, expected):
        text = str(exc)
        return text if text.startswith("freshview") else f"freshview: {text}"
    what = {"create": "creating", "verify": "verifying", "alter": "altering"}.get(action, "dropping") + f" view {name}"
    detail = (str(exc).strip().splitlines() or [""])[0][:300]
    return (f"freshview: {what} failed with an internal error ({type(exc).__name__}"
            f"{': ' + detail if detail else ''}); the service's log has the details")


def serve(views: "ViewCatalog", position: Any, stopping: Callable[[], bool], processed: Any = None,
          held: "list[Request] | None" = None, cancel: Callable[[str], None] = lambda name: None,
          retry: bool = True, verify: Callable[[Request], None] | None = None) -> "list[Plan]":
    """Answer every pending request (a view created starts at ``position``, the engine's) until
    ``stopping()``; the ``create``s to be populated beside the loop are returned as plans, their requests
    still running (``ViewCatalog.populate``; ``processed``: the last position the loop processed, default
    ``position``); an ``alter`` likewise (``ViewCatalog.populate(alter=True)``); a failed one gets its error
    (``freshview: ...``).  A create that must wait for running
    populations (``populating.MustWait``) stays claimed in ``held``, tried again first at the next call
    with ``retry`` (the caller's: once a population ended); a drop first ends the population of its view,
    or its waiting create (``cancel``, with its name).  A ``verify`` request goes to ``verify`` (queued beside
    the loop, answered when done: ``verification``)."""
    control = views.connector.control
    expected = views.errors
    held = [] if held is None else held
    waiting, held[:] = (list(held), []) if retry else ([], held)
    plans: list[Plan] = []
    while not stopping():
        admitted = bool(waiting)  # (a held create's row is there already)
        request = waiting.pop(0) if waiting else control.next_request()
        if request is None:
            return plans
        if not admitted:
            log.info("request %s: %s %s", request.id, request.action, request.name)
        try:
            if request.action in ("create", "alter"):  # (an alter is populated as a create is: ``populate``)
                plan = views.populate(request.name, request.sql or "", position, request=request.id,
                                      reader=request.requested_by, blocking=request.blocking,
                                      processed=position if processed is None else processed, admitted=admitted,
                                      **({"alter": True} if request.action == "alter" else {}))
                if plan is not None:
                    plans.append(plan)
            elif request.action == "verify" and verify is not None:
                verify(request)
            else:
                name = views.names.qualify(request.name)
                for other in [r for r in (*waiting, *held) if r.action in ("create", "alter") and
                              views.names.qualify(r.name) == name]:  # waiting for populations: answered, its row
                    (waiting if other in waiting else held).remove(other)  # dropped with the view
                    done = "created" if other.action == "create" else "altered"
                    control.finish_request(other.id, f"freshview: view {name} was dropped before it was {done}")
                cancel(name)
                views.drop(request.name, request=request.id, requested_by=request.requested_by)
        except MustWait as wait:
            if not admitted:
                log.info("request %s waits: %s", request.id, wait)
            held.append(request)
        except Fault:  # the database or the disk, not the request: served again once the service is back
            with contextlib.suppress(Exception):  # (on a dead connection: requeued when it attaches again)
                control.requeue_request(request.id)
            raise
        except Exception as exc:  # noqa: BLE001 - a request must never stop the service
            message = failure(request, exc, expected)
            if isinstance(exc, expected):
                log.info("request %s refused: %s", request.id, message.splitlines()[0])
            else:
                log.error("request %s (%s %s) failed", request.id, request.action, request.name, exc_info=True)
            control.finish_request(request.id, message)
        except BaseException:  # interrupted (stopped, ^C): not the request's fault; it goes back to the queue
            with contextlib.suppress(Exception):
                control.requeue_request(request.id)
            raise
    held.extend(waiting)
    return plans
