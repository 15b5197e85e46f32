"""JVM failures become one readable line that names the Java exception, never a py4j call or a stack."""

from __future__ import annotations

from py4j.protocol import Py4JJavaError

from freshview.runtime.executor import _spark_message


class _FakeJavaError(Py4JJavaError):
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def test_out_of_memory_names_the_exception_and_the_setting():
    err = _FakeJavaError("An error occurred while calling o12.readArrowStreamFromFile.\n"
                         ": java.lang.OutOfMemoryError: Java heap space\n"
                         "\tat org.apache.spark.sql.api.python.PythonSQLUtils$.readArrowStreamFromFile(x.scala:1)")
    message = _spark_message(err, "q12")
    assert message == "view 'q12': step failed: OutOfMemoryError: Java heap space (raise FRESHVIEW_DRIVER_MEMORY)"


def test_a_spark_exception_keeps_its_message():
    err = _FakeJavaError("An error occurred while calling o7.collectToPython.\n"
                         ": org.apache.spark.SparkException: Job aborted due to stage failure\n\tat a.b(c.java:1)")
    assert _spark_message(err, "v") == "view 'v': step failed: SparkException: Job aborted due to stage failure"
