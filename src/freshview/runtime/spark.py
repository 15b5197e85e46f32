"""SparkSession lifecycle: one embedded ``local[*]`` session by default.

A user who already runs Spark (a cluster, or Spark Connect) passes their own
session to ``IncrementalFlow(spark=...)``; freshview then only reads its
configuration and never stops it.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path

# PySpark warns on every Arrow conversion that it does not yet fully support pandas >= 3; freshview
# hands Spark Arrow tables, not pandas frames, so that one warning is noise.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
from pyspark.sql import SparkSession  # noqa: E402 - after the filter: importing PySpark may warn

_lock = threading.Lock()
_owned: SparkSession | None = None

# Small changes are freshview's common case.  Measured on 2 cores (1k-row change
# joined with a 500-row slice, then grouped): one shuffle partition without AQE
# takes ~0.26 s per job, two partitions ~0.5 s, AQE on ~0.4-0.5 s.  Map-side
# partial aggregation still runs in parallel, so big initial loads keep their
# parallelism.  A session the user passes in keeps its own settings.
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.ansi.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.autoBroadcastJoinThreshold": str(64 * 1024 * 1024),
    "spark.sql.legacy.timeParserPolicy": "CORRECTED",
}


# Errors only, without Spark's "default log4j profile" banner (see the file).
LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")


def _default_driver_memory() -> str:
    """A quarter of the machine's RAM, between 2 and 8 GiB: a view's first computation ships whole
    source tables into the JVM (SF1 lineitem needs more than 2 GiB); the heap is a cap, not an allocation."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "2g"
    return f"{max(2, min(8, total // 4 // 2**30))}g"


def get_session(master: str | None = None, driver_memory: str | None = None) -> SparkSession:
    """Return freshview's embedded session, starting it on first use (~7 s cold)."""
    global _owned
    with _lock:
        if _owned is not None and not _is_stopped(_owned):
            return _owned
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder.appName("freshview").master(
            master or os.environ.get("FRESHVIEW_SPARK_MASTER", "local[*]")
        )
        memory = driver_memory or os.environ.get("FRESHVIEW_DRIVER_MEMORY") or _default_driver_memory()
        builder = builder.config("spark.driver.memory", memory)
        for key, value in DEFAULT_CONF.items():
            builder = builder.config(key, value)
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}")
        _owned = builder.getOrCreate()
        _owned.sparkContext.setLogLevel("ERROR")
        logging.getLogger("py4j").setLevel(logging.WARNING)
        # PySpark logs every failed query as a JSON blob with the JVM trace; freshview
        # reports such failures itself as ExecutionError with Spark's one-line message.
        logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
        return _owned


def warm_up() -> threading.Thread:
    """Start the embedded session and run one tiny job in a background thread.

    A service starts Spark before the first view needs it, so a first
    computation does not also pay the JVM's start (~7 s cold) and first-job
    compilation.  Errors are left for the first real use to report.
    """
    def run() -> None:
        try:
            get_session().range(1).count()
        except Exception:  # noqa: BLE001 - reported when Spark is really needed
            logging.getLogger(__name__).debug("Spark warm-up failed", exc_info=True)

    thread = threading.Thread(target=run, name="freshview-spark-warm-up", daemon=True)
    thread.start()
    return thread


def _is_stopped(session: SparkSession) -> bool:
    try:
        return session.sparkContext._jsc is None  # type: ignore[attr-defined]
    except Exception:
        return True


def stop_session() -> None:
    global _owned
    with _lock:
        if _owned is not None:
            _owned.stop()
            _owned = None
