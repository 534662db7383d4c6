"""PySpark data source for Strata topics (Spark 4 Python Data Source API), short name `strata`.

    from spark_connector import register
    register(spark)
    df = (spark.read.format("strata").option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders").load())

Spark's Kafka source/sink options and schema; the tiered part of a topic is read by the executors straight from
the object store. See docs/spark.md.
"""
from __future__ import annotations

__all__ = ["register", "StrataDataSource"]


def register(spark) -> None:
    """Register the `strata` format on `spark` and enable Python data source filter pushdown, which the reader
    uses to narrow offset ranges (Spark refuses a reader with pushFilters while it is off)."""
    from spark_connector.source import StrataDataSource
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(StrataDataSource)


def __getattr__(name):
    if name == "StrataDataSource":
        from spark_connector.source import StrataDataSource
        return StrataDataSource
    raise AttributeError(name)
