"""Where a driver's errors become ``errors``' typed faults: the connectors' edge.

Each connector knows its driver: ``classify(exc)`` (``postgres/faults.py``,
``mysql/faults.py``) says whether an exception is a fault -- the connection
lost (``ConnectionLost``: retry after reconnecting) or one a restart cannot
fix (``Permanent``: bad credentials, the database gone) -- or None: an error
of the statement, left as it is (a failed request, say).  ``guarded(classify)``
applies that to every public method of a connector's class, so what reaches
the service is a fault of freshview's own, never psycopg's or PyMySQL's class;
the driver's exception stays chained (``raise fault from exc``) for the log.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator, TypeVar

Classify = Callable[[BaseException], "BaseException | None"]
T = TypeVar("T")

__all__ = ["Classify", "guarded", "translated"]


@contextlib.contextmanager
def translated(classify: Classify) -> Iterator[None]:
    """Re-raise a fault of the block's as the fault ``classify`` names (the original chained)."""
    try:
        yield
    except Exception as exc:
        fault = classify(exc)
        if fault is None:
            raise
        raise fault from exc


def guarded(classify: Classify) -> Callable[[type[T]], type[T]]:
    """A class decorator: every public method (generator and ``contextmanager`` methods included, whose
    errors arise while they are iterated or entered) raises its faults as ``classify`` names them."""
    def decorate(cls: type[T]) -> type[T]:
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(value):
                setattr(cls, name, _wrap(value, classify))
        return cls
    return decorate


def _wrap(fn: Callable[..., Any], classify: Classify) -> Callable[..., Any]:
    inner = getattr(fn, "__wrapped__", None)
    if inner is not None and inspect.isgeneratorfunction(inner):  # a @contextlib.contextmanager method
        return functools.wraps(fn)(contextlib.contextmanager(_wrap(inner, classify)))
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Any:
            with translated(classify):
                return (yield from fn(*args, **kwargs))
        return generator

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with translated(classify):
            return fn(*args, **kwargs)
    return call
