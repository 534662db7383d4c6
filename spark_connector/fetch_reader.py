"""Executor side: read the part of an offset range that is not in the remote tier (or all of it with
strata.directRead=false) by Fetch from the partition leader, with a confluent-kafka Consumer.

The consumer is assigned (no group membership, nothing committed: offsets live in Spark's checkpoint, as with
Spark's Kafka source) and uses auto.offset.reset=error, so an offset that is no longer available is reported
exactly: an error with failOnDataLoss=true, else a warning and a restart at the earliest available offset.
"""
from __future__ import annotations

import time
import uuid
from typing import Iterator

from spark_connector.options import ReadOptions
from spark_connector.planning import report_data_loss


def consumer_conf(opts: ReadOptions) -> dict:
    conf = {"group.id": f"strata-spark-{uuid.uuid4().hex}", "fetch.wait.max.ms": 100}
    conf.update(dict(opts.client.kafka_conf))
    conf.update({"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False,
                 "auto.offset.reset": "error"})
    return opts.client.conf(**conf)


def fetch_range(opts: ReadOptions, topic: str, partition: int, start: int, end: int, builder) -> Iterator:
    """Append records [start, end) of topic-partition to `builder`, yielding a RecordBatch whenever it is full."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException, TopicPartition
    c = Consumer(consumer_conf(opts))
    try:
        c.assign([TopicPartition(topic, partition, start)])
        next_offset = start
        timeout = opts.poll_timeout_ms / 1000
        deadline = time.monotonic() + timeout
        while next_offset < end:
            msgs = c.consume(num_messages=min(10_000, end - next_offset), timeout=0.5)
            if not msgs:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"Timed out after {opts.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) fetching "
                        f"{topic}-{partition} at offset {next_offset} (range ends at {end}) from "
                        f"{opts.client.bootstrap}: is the broker up?")
                continue
            deadline = time.monotonic() + timeout
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        low, _high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout,
                                                             cached=False)
                        if low <= next_offset:
                            raise KafkaException(err)
                        report_data_loss(opts.fail_on_data_loss,
                                         f"Offsets [{next_offset}, {min(low, end)}) of {topic}-{partition} are no "
                                         f"longer available (earliest is now {low})")
                        next_offset = min(low, end)
                        c.assign([TopicPartition(topic, partition, next_offset)])
                        break
                    raise KafkaException(err)
                off = m.offset()
                if off < next_offset:
                    continue
                if off >= end:
                    next_offset = end
                    break
                ts_type, ts = m.timestamp()
                builder.add(off, ts, 1 if ts_type == TIMESTAMP_LOG_APPEND_TIME else 0, m.key(), m.value(),
                            m.headers() if builder.include_headers else None)
                next_offset = off + 1
                if builder.full():
                    yield builder.take()
    finally:
        c.close()
