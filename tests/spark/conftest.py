"""Fixtures of the Spark connector suite: one local[2] SparkSession for the whole suite, a tiered `strata broker`
process on the local object store, and helpers that produce known records and wait until they are tiered.

The shared broker's store URL is RELATIVE to the broker's working directory (file://./...), like `make run`'s, so
every read through it also checks that DescribeConfigs reports an absolute URL the executors can open.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# BrokerProcess and free_port are re-exported: pytest imports this file as the module `conftest` too, and
# tests elsewhere do `from conftest import BrokerProcess, free_port` (see spark_helpers)
from spark_helpers import ROOT, BrokerProcess, free_port, kafka_source_jars, tiered_overrides  # noqa: E402,F401


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from spark_connector import register
    builder = (SparkSession.builder.master("local[2]").appName("strata-connector-tests")
               .config("spark.driver.memory", "512m").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true"))
    # Spark's own Kafka source (test_kafka_source.py) must be on the classpath before the JVM starts (spark.jars has
    # no effect on a running one); without java or mvn there are none, and the other suites do not need them.
    jars = kafka_source_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def tiered_broker(tmp_path_factory):
    """A broker with tiering on, its store given as a path relative to the broker's working directory."""
    tmp = tmp_path_factory.mktemp("spark-tiered")
    rel = os.path.relpath(tmp / "objects", ROOT)
    b = BrokerProcess(tmp, tiered_overrides(f"file://./{rel}")).start()
    b.store_path = tmp / "objects"
    yield b
    rc = b.stop()
    text = b.log_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text, text[text.index("Traceback") - 300:][:4000]
