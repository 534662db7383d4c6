"""A corrupted segment found at start-up (issue 26): after kill -9 the active segment is rescanned and cut at the
first batch whose CRC-32C does not match (Kafka's LogLoader.recoverLog); a real consumer checking CRCs reads every
batch before it and nothing of it or after it, and producing continues at the offset where the log was cut."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from protocol.record_batch import build_batch
from rawclient import RawClient

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _consume(bootstrap: str, topic: str, timeout: float = 30) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}", "check.crcs": True,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < high and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def test_flipped_byte_in_the_active_segment_after_kill9_cuts_the_log_there(make_broker, topic_name):
    b = make_broker()
    with RawClient(b.bootstrap) as c:
        assert c.create_topic(topic_name, 1).error_code == 0
        for i in range(20):
            p = c.produce(topic_name, 0, build_batch([(None, b"rec-%02d-%d" % (i, j)) for j in range(3)]), acks=1)
            assert p.error_code == 0 and p.base_offset == 3 * i
    b.kill9()
    [segment] = sorted((b.data_dir / "logs" / f"{topic_name}-0").glob("*.log"))
    with open(segment, "r+b") as f:                  # flip one byte in the records of batch 10
        pos = 0
        for _ in range(10):
            f.seek(pos + 8)
            pos += 12 + int.from_bytes(f.read(4), "big")
        f.seek(pos + 8)
        end = pos + 12 + int.from_bytes(f.read(4), "big")
        f.seek(end - 2)
        byte = f.read(1)
        f.seek(end - 2)
        f.write(bytes([byte[0] ^ 0x40]))
    b.start()
    got = _consume(b.bootstrap, topic_name)
    assert got == [(3 * i + j, b"rec-%02d-%d" % (i, j)) for i in range(10) for j in range(3)]
    with RawClient(b.bootstrap) as c:
        p = c.produce(topic_name, 0, build_batch([(None, b"after")]), acks=-1)
        assert p.error_code == 0 and p.base_offset == 30
    assert _consume(b.bootstrap, topic_name)[-1] == (30, b"after")
    text = b.log_text()
    assert "Traceback" not in text, text[text.index("Traceback") - 500:][:5000]
