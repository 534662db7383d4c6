"""Data that disappears between planning and reading, in the executors' code: a remote segment deleted from the
store after the driver planned it, and offsets deleted (DeleteRecords) before a Fetch task reaches them. With
failOnDataLoss=true the task fails; with false it skips what is gone, with a warning, and returns the rest."""
from __future__ import annotations

import logging

import pytest
from confluent_kafka import TopicPartition

from spark_connector.options import parse_read_options
from spark_connector.planning import DataLossError, OffsetRange, Piece
from spark_connector.source import read_range
from spark_helpers import admin_client, base_options, create_tiered, create_topic, plan, produce_dataset, \
    wait_tiered

pytestmark = pytest.mark.spark


def offsets_read(opts, part) -> list[int]:
    return [o for rb in read_range(opts, part) for o in rb.column("offset").to_pylist()]


def test_remote_segment_deleted_after_planning(tiered_broker, caplog):
    topic = "spark-loss-remote"
    create_tiered(tiered_broker, topic)
    produce_dataset(tiered_broker.bootstrap, topic, 600)
    wait_tiered(tiered_broker, topic, 300)
    options = base_options(tiered_broker, subscribe=topic)
    [part], _ = plan(options)
    first = part.pieces[0]
    assert first.key_prefix is not None and first.start == 0
    (tiered_broker.store_path / (first.key_prefix + ".log")).unlink()      # e.g. retention, after planning

    with pytest.raises(DataLossError, match=f"Remote segment {first.key_prefix} of {topic}-0"):
        offsets_read(parse_read_options(options, streaming=False), part)
    lenient = parse_read_options({**options, "failOnDataLoss": "false"}, streaming=False)
    with caplog.at_level(logging.WARNING, logger="strata.spark"):
        got = offsets_read(lenient, part)
    assert got == list(range(first.end, 600))
    assert f"[{first.start}, {first.end}) cannot be read" in caplog.text


def test_offsets_deleted_before_the_fetch_task(tiered_broker, caplog):
    topic = "spark-loss-fetch"
    create_topic(tiered_broker.bootstrap, topic, 1)
    produce_dataset(tiered_broker.bootstrap, topic, 50)
    part = OffsetRange(topic, 0, 0, 50, (Piece(0, 50),))                    # planned before the deletion
    admin = admin_client(tiered_broker.bootstrap)
    [fut] = admin.delete_records([TopicPartition(topic, 0, 20)]).values()
    fut.result(timeout=15)

    options = base_options(tiered_broker, subscribe=topic)
    with pytest.raises(DataLossError, match=rf"Offsets \[0, 20\) of {topic}-0 are no longer available"):
        offsets_read(parse_read_options(options, streaming=False), part)
    lenient = parse_read_options({**options, "failOnDataLoss": "false"}, streaming=False)
    with caplog.at_level(logging.WARNING, logger="strata.spark"):
        assert offsets_read(lenient, part) == list(range(20, 50))
    assert "no longer available" in caplog.text
