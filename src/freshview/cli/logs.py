"""Where the CLI's output goes: freshview's own lines to the terminal, everything else to a log file.

Libraries are noisy: pandas/PySpark ``FutureWarning``s, py4j's logging, the
JVM's start-up lines and Spark's log4j WARN lines.  ``route_output`` sends
them all to ``<log file>``:

* Python warnings and every logger but ``freshview`` go to a file handler
  (``logging.captureWarnings``); ``freshview`` logs to both the file and the
  terminal (rich);
* tracebacks go to the file only: the terminal shows a record's message
  without its ``exc_info``, and records logged with ``extra={"file_only":
  True}`` (a fault's details, the error that stopped the service) not at all;
  an uncaught exception in a thread is logged the same way;
* when the process's own stdout/stderr are real file descriptors (not a
  test runner's capture), descriptors 1 and 2 are pointed at the log file and
  ``sys.stdout``/``sys.stderr`` at duplicates of the original terminal: what a
  library or a child process (the JVM Spark runs in, an embedded PostgreSQL)
  writes to the inherited descriptors lands in the file, freshview's rich
  consoles still reach the terminal.

Spark's own log4j configuration (``runtime/log4j2.properties``, set by
``runtime.spark``) keeps the JVM at WARN without its banner lines.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Iterator

from rich.console import Console

LOG_NAME = "freshview.log"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextlib.contextmanager
def route_output(log_path: Path, console: Console, level: int = logging.INFO) -> Iterator[Path]:
    """Library output to ``log_path``; ``console`` (freshview's) stays on the terminal.

    freshview's log records of ``level`` and above reach the terminal; the file gets them from INFO
    (DEBUG when ``level`` is DEBUG).  Python logging is put back when the block ends; the descriptors
    stay routed until the process exits (what the JVM prints while shutting down stays in the file).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = open(log_path, "a", buffering=1, encoding="utf-8")
    _redirect_descriptors(log_file)
    root = logging.getLogger()
    previous = (root.handlers[:], root.level, logging.getLogger("freshview").level)
    file_handler = logging.StreamHandler(log_file)
    file_handler.setFormatter(logging.Formatter(_FORMAT))
    from rich.logging import RichHandler

    terminal = RichHandler(console=console, show_path=False, rich_tracebacks=False)
    terminal.addFilter(for_terminal)
    terminal.setFormatter(_WithoutTraceback("%(message)s"))
    terminal.setLevel(level)
    root.handlers[:] = [file_handler, terminal]
    root.setLevel(logging.WARNING)
    logging.getLogger("freshview").setLevel(min(level, logging.INFO))
    logging.captureWarnings(True)
    thread_hook, threading.excepthook = threading.excepthook, _log_thread_exception
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # each library warning once, into the file
            yield log_path
    finally:
        threading.excepthook = thread_hook
        logging.captureWarnings(False)
        root.handlers[:], root.level = previous[0], previous[1]
        logging.getLogger("freshview").setLevel(previous[2])
        log_file.close()  # descriptors 1 and 2 (dup2'd) keep pointing at the log until the process exits,
        # so what the JVM or an embedded server print while shutting down stays out of the terminal too


def for_terminal(record: logging.LogRecord) -> bool:
    """freshview's own records, but not those meant for the log file only."""
    return (record.name == "freshview" or record.name.startswith("freshview.")) and \
        not getattr(record, "file_only", False)


class _WithoutTraceback(logging.Formatter):
    """The message alone: a record's traceback (exc_info, stack) is the log file's."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    logging.getLogger("freshview").error("uncaught exception in thread %s: %s",
                                         args.thread.name if args.thread else "?", args.exc_value,
                                         exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
                                         extra={"file_only": True})


def _redirect_descriptors(log_file) -> None:
    """Point fds 1 and 2 at the log file; sys.stdout/stderr (and rich) keep the terminal (when fds exist)."""
    try:
        if sys.stdout.fileno() != 1 or sys.stderr.fileno() != 2:
            return
    except (AttributeError, OSError, ValueError):  # a test runner's in-memory capture
        return
    sys.stdout.flush()
    sys.stderr.flush()
    out_fd, err_fd = os.dup(1), os.dup(2)
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = os.fdopen(out_fd, "w", buffering=1, encoding=old_out.encoding, errors="replace")
    sys.stderr = os.fdopen(err_fd, "w", buffering=1, encoding=old_err.encoding, errors="replace")
    os.dup2(log_file.fileno(), 1)
    os.dup2(log_file.fileno(), 2)
    atexit.register(_close_terminal, old_out, old_err)


def _close_terminal(old_out, old_err) -> None:
    """At exit: late writes go to the log (the original objects write to fds 1 and 2), our copies close."""
    ours = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = old_out, old_err
    for stream in ours:
        if stream is not old_out and stream is not old_err:
            try:
                stream.close()
            except OSError:
                pass


