"""Prometheus metrics a Kafka operator expects from every broker: request time per API (Kafka's RequestMetrics) and
bytes in and out (BrokerTopicMetrics), counted as real clients use the broker."""
from __future__ import annotations

import urllib.request

from confluent_kafka import Consumer, Producer

from conftest import BrokerProcess, free_port


def samples(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {series: float(value) for series, value in (line.rsplit(" ", 1) for line in text.splitlines()
                                                      if line and not line.startswith("#"))}


def test_request_times_and_bytes_are_counted(tmp_path, topic_name):
    port = free_port()
    b = BrokerProcess(tmp_path, {"metrics.port": str(port)}).start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(50):
            p.produce(topic_name, b"x" * 100)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": topic_name, "auto.offset.reset": "earliest"})
        c.subscribe([topic_name])
        got = 0
        while got < 50:
            got += len([m for m in c.consume(50, 10) if m.error() is None])
        c.close()
        m = samples(port)
        for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "FindCoordinator", "JoinGroup"):
            assert m[f'kafka_network_requestmetrics_total_time_seconds_count{{request="{api}"}}'] >= 1, api
        assert m['kafka_network_requestmetrics_total_time_seconds_bucket{le="+Inf",request="Produce"}'] == \
            m['kafka_network_requestmetrics_total_time_seconds_count{request="Produce"}']
        assert m["kafka_server_brokertopicmetrics_bytes_in_total"] >= 50 * 100
        assert m["kafka_server_brokertopicmetrics_bytes_out_total"] >= 50 * 100
        assert m["kafka_server_replicamanager_leader_count"] == m["kafka_server_replicamanager_partition_count"] >= 1
        assert m["kafka_server_replicamanager_under_replicated_partitions"] == 0
        assert m["kafka_controller_kafkacontroller_active_controller_count"] == 1
        assert m["kafka_controller_kafkacontroller_offline_partitions_count"] == 0
    finally:
        assert b.stop() == 0
    assert "Traceback" not in b.log_text()
