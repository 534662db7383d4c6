"""Executor side: read the part of an offset range that is not in the remote tier (or all of it with
strata.directRead=false) by Fetch, with a confluent-kafka Consumer: from the partition's leader, or with
`kafka.client.rack` from the in-sync replica the leader names for that rack (KIP-392).

The consumer is assigned (no group membership, nothing committed: offsets live in Spark's checkpoint, as with
Spark's Kafka source) and uses auto.offset.reset=error, so an offset that is no longer available is reported
exactly: an error with failOnDataLoss=true, else a warning and a restart at the earliest available offset.

A leader change or a broker lost mid-task does not fail the task: librdkafka finds the new leader and the task
carries on from the next offset it needs; transient errors it reports meanwhile (a lost connection, all brokers
down for a moment) are logged. Only no progress for kafkaConsumer.pollTimeoutMs, or a non-retriable error, fails
the task (and Spark then retries it on the same range).
"""
from __future__ import annotations

import time
from typing import Iterator

from spark_connector.options import ReadOptions, consumer_group_id
from spark_connector.planning import log, report_data_loss


def transient(err) -> bool:
    """Errors librdkafka recovers from by itself (reconnects, metadata refresh, new leader): keep consuming."""
    from confluent_kafka import KafkaError
    if err.fatal():
        return False
    return err.retriable() or err.code() in (
        KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE,
        KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION, KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._WAIT_COORD)


def consumer_conf(opts: ReadOptions) -> dict:
    """Spark's kafkaParamsForExecutors with librdkafka names: the query's group id (never joined, nothing
    committed), offsets only where the driver says (no reset), kafka.* options on top (e.g. client.rack), and
    kafka.isolation.level, read_uncommitted unless set (Kafka's default, which Spark keeps; librdkafka's own default
    is read_committed)."""
    conf = {"fetch.wait.max.ms": 100}
    conf.update(dict(opts.client.kafka_conf))
    conf["group.id"] = consumer_group_id(opts, "executor")
    conf.update({"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False,
                 "auto.offset.reset": "error",
                 "isolation.level": "read_committed" if opts.client.read_committed else "read_uncommitted"})
    return opts.client.conf(**conf)


def fetch_range(opts: ReadOptions, topic: str, partition: int, start: int, end: int, builder) -> Iterator:
    """Append records [start, end) of topic-partition to `builder`, yielding a RecordBatch whenever it is full.

    The consumer never returns control batches (transaction markers), nor, with read_committed, records of aborted
    transactions, so offsets have gaps and the last offsets of a range may never come: the range is done when a
    record at or past `end` arrives or when the consumer's position (the next offset it would return, past the
    skipped batches) reaches `end`."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException, TopicPartition
    c = Consumer(consumer_conf(opts))
    tp = TopicPartition(topic, partition)

    def position() -> int:
        return c.position([tp])[0].offset        # OFFSET_INVALID (-1001) before anything was consumed

    try:
        c.assign([TopicPartition(topic, partition, start)])
        next_offset = start
        timeout = opts.poll_timeout_ms / 1000
        deadline = time.monotonic() + timeout
        while next_offset < end:
            msgs = c.consume(num_messages=min(10_000, end - next_offset), timeout=0.5)
            if not msgs:
                if position() >= end:           # only skipped batches (markers, aborted records) were left
                    break
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
                    if transient(err):
                        log.warning("fetching %s-%d at offset %d: %s (retrying)", topic, partition, next_offset,
                                    err)
                        continue
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
            if next_offset < end and position() >= end:
                break
    finally:
        c.close()
