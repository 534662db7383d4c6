"""Batch and streaming writes with the columns of Spark's Kafka sink (KafkaWriter): `value` (required), `key`,
`topic` (or the `topic` option, which overrides the column), `headers`, `partition`.

Each task produces its rows with one idempotent confluent-kafka Producer (acks=all) and waits for every delivery
report before it reports success; any delivery error fails the task, and so the Spark job (at-least-once: a retried
task or micro-batch produces its rows again, as with Spark's Kafka sink).
"""
from __future__ import annotations

import time

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from spark_connector.options import StrataOptionError, WriteOptions


def check_write_schema(schema, opts: WriteOptions) -> None:
    """KafkaWriter.validateQuery, with its messages."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType
    fields = {f.name.lower(): f.dataType for f in schema.fields} if schema is not None else {}
    if opts.topic is None:
        if "topic" not in fields:
            raise StrataOptionError("topic option required when no 'topic' attribute is present. Use the topic "
                                    "option for setting a topic.")
        if not isinstance(fields["topic"], StringType):
            raise StrataOptionError(f"Topic type must be a StringType, got {fields['topic'].simpleString()}")
    if "value" not in fields:
        raise StrataOptionError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise StrataOptionError(f"{name} attribute type must be a StringType or BinaryType, got "
                                    f"{fields[name].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise StrataOptionError(f"headers attribute type must be array<struct<key:string,value:binary>>, got "
                                    f"{t.simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise StrataOptionError(f"partition attribute type must be an IntegerType, got "
                                f"{fields['partition'].simpleString()}")


class ProduceCommitMessage(WriterCommitMessage):
    def __init__(self, rows: int):
        self.rows = rows


def _column(batch, name):
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        for i, f in enumerate(batch.schema):          # Spark column names are case-insensitive
            if f.name.lower() == name:
                idx = i
                break
    return batch.column(idx).to_pylist() if idx >= 0 else None


def produce_batches(opts: WriteOptions, batches) -> int:
    """Produce every row of the Arrow batches; raise if any delivery failed. Returns the number of rows."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    # librdkafka retries refused credentials and failed TLS handshakes for good (until message.timeout.ms); Kafka's
    # producer fails the send on an AuthenticationException, and so does the task here
    refused: list = []

    def on_error(err):
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            refused.append(err.str())

    producer = Producer(opts.client.conf(**opts.producer_conf, error_cb=on_error))
    errors: list = []
    rows = 0

    def on_delivery(err, msg):
        if err is not None and len(errors) < 10:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
        elif err is not None:
            errors.append(None)

    for batch in batches:
        n = batch.num_rows
        values = _column(batch, "value")
        keys = _column(batch, "key") or [None] * n
        topics = [opts.topic] * n if opts.topic else _column(batch, "topic")
        headers = _column(batch, "headers") or [None] * n
        partitions = _column(batch, "partition") or [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise StrataOptionError("null topic present in the data. Use the topic option for setting a topic.")
            kw = {"value": _bytes(values[i]), "key": _bytes(keys[i]), "on_delivery": on_delivery}
            if headers[i]:
                kw["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            if partitions[i] is not None:
                kw["partition"] = partitions[i]
            while True:
                try:
                    producer.produce(topic, **kw)
                    break
                except BufferError:                  # local queue full: serve delivery reports, then retry
                    producer.poll(0.05)
                except KafkaException as e:
                    raise RuntimeError(f"producing to {topic} failed: {e}") from e
            producer.poll(0)
            if errors or refused:
                break
        rows += n
        if errors or refused:
            break
    deadline = time.monotonic() + opts.flush_timeout_ms / 1000
    remaining = len(producer)
    while not refused:            # in slices, so that refused credentials end the wait
        remaining = producer.flush(max(0.0, min(1.0, deadline - time.monotonic())))
        if not remaining or time.monotonic() >= deadline:
            break
    if refused:
        raise RuntimeError(f"producing to {opts.client.bootstrap} failed: {refused[0]} (check kafka.security.protocol, "
                           "kafka.sasl.* and kafka.ssl.*)")
    if errors:
        shown = [e for e in errors if e is not None]
        raise RuntimeError(f"{len(errors)} record(s) could not be delivered to {opts.client.bootstrap}: "
                           + "; ".join(shown))
    if remaining:
        raise RuntimeError(f"{remaining} record(s) still undelivered after {opts.flush_timeout_ms} ms "
                           f"(strata.flushTimeoutMs) to {opts.client.bootstrap}")
    return rows


def _bytes(v):
    return v.encode("utf-8") if isinstance(v, str) else v


class StrataWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions):
        self.opts = opts

    def write(self, iterator):
        return ProduceCommitMessage(produce_batches(self.opts, iterator))

    def commit(self, messages) -> None:
        pass                                        # records are visible once acknowledged: nothing to publish

    def abort(self, messages) -> None:
        pass                                        # produced records cannot be taken back (at-least-once)


class StrataStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions):
        self.opts = opts

    def write(self, iterator):
        return ProduceCommitMessage(produce_batches(self.opts, iterator))

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
