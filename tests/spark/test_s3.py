"""Direct reads from an S3 remote tier (moto_server): the endpoint and region come from the broker (DescribeConfigs),
the credentials never do (the broker does not hand out secrets) and are given as strata.store.* options."""
from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from py4j.protocol import Py4JJavaError

from moto_server import ACCESS_KEY, SECRET_KEY, MotoServer, moto_server  # noqa: F401  (fixture)
from spark_helpers import BrokerProcess, check_rows, create_tiered, produce_dataset, rows_of, tiered_overrides, \
    wait_tiered

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def test_direct_read_from_s3(spark, moto_server, tmp_path):  # noqa: F811
    server: MotoServer = moto_server
    bucket = server.new_bucket()
    store = {"remote.log.storage.manager.store." + k.replace("_", "."): str(v)
             for k, v in server.store_options(max_attempts=2).items()}
    b = BrokerProcess(tmp_path, {**tiered_overrides(f"s3://{bucket}/tiered"), **store}).start()
    try:
        topic = "spark-s3"
        create_tiered(b, topic)
        expected = produce_dataset(b.bootstrap, topic, 500, codec="snappy")
        wait_tiered(b, topic, 250)
        creds = {"strata.store.access.key.id": ACCESS_KEY, "strata.store.secret.access.key": SECRET_KEY}
        options = {"kafka.bootstrap.servers": b.bootstrap, "subscribe": topic, "includeHeaders": "true"}

        from spark_helpers import plan
        ranges, _ = plan({**options, **creds})
        url, store_options = ranges[0].store
        assert url == f"s3://{bucket}/tiered"
        assert dict(store_options)["endpoint_url"] == server.endpoint and "secret_access_key" in dict(store_options)
        assert sum(p.end - p.start for r in ranges for p in r.pieces if p.key_prefix) >= 250

        df = spark.read.format("strata").options(**options, **creds).load()
        check_rows(rows_of(df), expected, topic)

        # a store that does not hold the segments is reported by the driver, before any task runs; with
        # strata.store.url given, the broker's store options are not used: the endpoint must be given too
        wrong = {"strata.store.url": f"s3://{bucket}/elsewhere", "strata.store.endpoint.url": server.endpoint,
                 "strata.store.region": "us-east-1", **creds}
        with pytest.raises((PySparkException, Py4JJavaError)) as e:
            spark.read.format("strata").options(**options, **wrong).load().collect()
        assert f"the object store s3://{bucket}/elsewhere has no objects of spark-s3-0" in str(e.value)
    finally:
        b.stop()
