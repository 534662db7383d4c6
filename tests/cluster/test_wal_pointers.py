"""DescribeWalPointers on a three-broker cluster with a fast store: a reader (the Spark planner, issue 15) gets from
a partition's leader the pointers to its committed recent batches in the fast store, and decoding them gives exactly
the acknowledged records, in order, none at or above the high watermark."""
from __future__ import annotations

import asyncio

from protocol.errors import ErrorCode
from protocol.records import iter_all_records
from protocol.wal_pointers_client import describe_wal_pointers
from storage.objectstore.object_store import open_object_store
from storage.wal.wal_object import chunk_crc_ok
from tests.cluster.helpers import create
from tests.cluster.test_wal import WAL, produce, wal_cluster


def read_chunks(url: str, pointers) -> bytes:
    async def run():
        store = open_object_store(url)
        try:
            out = []
            for p in pointers:
                data = await store.get(p.key, p.position, p.position + p.size)
                assert chunk_crc_ok(data, p.crc), p
                out.append(data)
            return b"".join(out)
        finally:
            await store.close()
    return asyncio.run(run())


def test_a_reader_gets_the_committed_batches_from_the_fast_store(tmp_path):
    c = wal_cluster(tmp_path)
    try:
        topic = "wal-readers"
        create(c, topic, configs=WAL)
        produce(c.bootstrap, topic, 3000, size=200)
        leader = c.leader(topic)
        lb = c.brokers[leader]
        got = describe_wal_pointers("127.0.0.1", lb.port, topic, {0: 0})[0]
        assert (got.error_code, got.log_start_offset, got.store) == (0, 0, "")
        assert got.high_watermark == 3000 and got.pointers, got
        assert got.pointers[0].base_offset == 0 and got.pointers[-1].last_offset >= 2999
        for a, b in zip(got.pointers, got.pointers[1:]):
            assert b.base_offset == a.last_offset + 1          # no gap
        assert all(p.base_offset < got.high_watermark for p in got.pointers)
        records = [r for r in iter_all_records(read_chunks(f"file://{tmp_path / 'fast'}", got.pointers))
                   if r.offset < got.high_watermark]
        assert [r.offset for r in records] == list(range(3000))
        assert [r.value for r in records] == [str(i).encode().ljust(200, b".") for i in range(3000)]

        later = describe_wal_pointers("127.0.0.1", lb.port, topic, {0: 2500})[0]
        assert later.error_code == 0 and later.pointers[0].base_offset <= 2500 <= later.pointers[0].last_offset
        small = describe_wal_pointers("127.0.0.1", lb.port, topic, {0: 0}, max_bytes=1)[0]
        assert len(small.pointers) == 1                          # at least one, within max_bytes otherwise

        follower = next(b for i, b in c.brokers.items() if i != leader)
        assert describe_wal_pointers("127.0.0.1", follower.port, topic, {0: 0})[0].error_code == \
            ErrorCode.not_leader_or_follower
        assert describe_wal_pointers("127.0.0.1", lb.port, topic, {0: 3001})[0].error_code == \
            ErrorCode.offset_out_of_range
        assert describe_wal_pointers("127.0.0.1", lb.port, "no-such-topic", {0: 0})[0].error_code == \
            ErrorCode.unknown_topic_or_partition
        plain = "plain-topic"                                    # no remote.wal.enable: nothing to point at
        create(c, plain)
        produce(c.bootstrap, plain, 10)
        pb = c.brokers[c.leader(plain)]
        assert describe_wal_pointers("127.0.0.1", pb.port, plain, {0: 0})[0].pointers == []
        for b in c.brokers.values():
            assert "Traceback" not in b.log_text()
    finally:
        c.stop()


def test_malformed_requests_close_the_connection_and_the_api_is_not_advertised(broker):
    import socket
    import struct

    from protocol.client import BrokerConnection

    async def api_keys():
        conn = BrokerConnection("127.0.0.1", broker.port, client_id="t")
        try:
            r = await conn.send(18, 3, {"client_software_name": "t", "client_software_version": "1"}, timeout=10)
            return {k.api_key for k in r.api_keys}
        finally:
            conn.close()
    keys = asyncio.run(api_keys())
    assert 1 in keys and 21332 not in keys                      # Kafka clients never see Strata's own API

    for body in (b"", b"\x00\x00\x00\x01", b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00",
                 b"\x00\x00\x00\x01\xff\xff\xff\xfe", b"\x00\x00\x00\x01\x00\x00\x00\x00extra"):
        frame = struct.pack(">hhi", 21332, 0, 7) + struct.pack(">h", 1) + b"t" + body
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            s.sendall(struct.pack(">i", len(frame)) + frame)
            assert s.recv(64) == b"", body                       # closed, no answer
    assert "malformed request" in broker.log_text()
    asyncio.run(api_keys())                                      # still serving
