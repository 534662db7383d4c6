"""Prometheus metrics a Kafka operator expects from every broker, counted as real clients use the broker: request
time and errors per API (Kafka's RequestMetrics), bytes and messages per topic (BrokerTopicMetrics), each local
log's size, group counts by protocol and state, and consumer-group lag as kafka-exporter reports it."""
from __future__ import annotations

import time
import urllib.request

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from conftest import BrokerProcess, free_port
from protocol.record_batch import build_batch
from rawclient import RawClient


def samples(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {series: float(value) for series, value in (line.rsplit(" ", 1) for line in text.splitlines()
                                                      if line and not line.startswith("#"))}


def wait_for_sample(port: int, series: str, value: float, timeout: float = 30) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        m = samples(port)
        if m.get(series) == value or time.monotonic() > deadline:
            assert m.get(series) == value, (series, m.get(series))
            return m
        time.sleep(0.1)


def test_request_times_and_bytes_are_counted(tmp_path, topic_name):
    port = free_port()
    b = BrokerProcess(tmp_path, {"metrics.port": str(port), "group.consumer.heartbeat.interval.ms": "300"}).start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(50):
            p.produce(topic_name, b"x" * 100)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": topic_name, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic_name])
        got = 0
        while got < 50:
            got += len([m for m in c.consume(50, 10) if m.error() is None])
        c.commit(asynchronous=False)                    # offset 50
        c.close()
        for i in range(20):                             # the group's lag: 20
            p.produce(topic_name, b"y" * 100)
        assert p.flush(30) == 0
        m = samples(port)
        for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "FindCoordinator", "JoinGroup"):
            assert m[f'kafka_network_requestmetrics_total_time_seconds_count{{request="{api}"}}'] >= 1, api
        assert m['kafka_network_requestmetrics_total_time_seconds_bucket{le="+Inf",request="Produce"}'] == \
            m['kafka_network_requestmetrics_total_time_seconds_count{request="Produce"}']
        topic = f'{{topic="{topic_name}"}}'
        assert m["kafka_server_brokertopicmetrics_messages_in_total" + topic] == 70
        assert m["kafka_server_brokertopicmetrics_bytes_in_total" + topic] >= 70 * 100
        assert m["kafka_server_brokertopicmetrics_bytes_out_total" + topic] >= 50 * 100
        # nothing recompressed (compression.type=producer): the local log holds exactly the bytes appended
        assert m[f'kafka_log_log_size{{partition="0",topic="{topic_name}"}}'] == \
            m["kafka_server_brokertopicmetrics_bytes_in_total" + topic]
        assert m["kafka_server_replicamanager_leader_count"] == m["kafka_server_replicamanager_partition_count"] >= 1
        assert m["kafka_server_replicamanager_under_replicated_partitions"] == 0
        rm = "kafka_server_replicamanager_"
        assert m[rm + "isr_shrinks_total"] == m[rm + "isr_expands_total"] == m[rm + "failed_isr_updates_total"] == 0
        assert m["kafka_controller_kafkacontroller_active_controller_count"] == 1
        assert m["kafka_controller_kafkacontroller_offline_partitions_count"] == 0

        # the group, Empty since its only member left, reported by its coordinator with its lag
        group = f'consumergroup="{topic_name}"'
        assert m['kafka_server_group_coordinator_metrics_group_count{protocol="classic"}'] == 1
        assert m['kafka_server_group_coordinator_metrics_classic_group_count{state="Empty"}'] == 1
        assert m['kafka_server_group_coordinator_metrics_classic_group_count{state="Stable"}'] == 0
        assert m[f'kafka_consumergroup_current_offset{{{group},partition="0",topic="{topic_name}"}}'] == 50
        assert m[f'kafka_consumergroup_lag{{{group},partition="0",topic="{topic_name}"}}'] == 20
        assert m[f'kafka_consumergroup_lag_sum{{{group},topic="{topic_name}"}}'] == 20

        # a KIP-848 consumer group: counted by protocol and state
        member = Consumer({"bootstrap.servers": b.bootstrap, "group.id": topic_name + "-848",
                           "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        member.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.1)
        m = wait_for_sample(port, 'kafka_server_group_coordinator_metrics_consumer_group_count{state="Stable"}', 1)
        assert m['kafka_server_group_coordinator_metrics_group_count{protocol="consumer"}'] == 1
        member.close()

        # errors, by API and Kafka's error name: a partition or topic that does not exist, through Produce
        # (hand-encoded) and DeleteTopics (kio-encoded)
        with RawClient(b.bootstrap) as raw:
            assert raw.produce(topic_name, 7, build_batch([(None, b"z")])).error_code == 3
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        missing = topic_name + "-missing"
        try:
            admin.delete_topics([missing])[missing].result(timeout=30)
            raise AssertionError("deleting a missing topic succeeded")
        except Exception as e:
            assert "UNKNOWN_TOPIC_OR_PART" in str(e), e
        m = samples(port)
        errors = "kafka_network_requestmetrics_errors_total"
        assert m[f'{errors}{{error="UNKNOWN_TOPIC_OR_PARTITION",request="Produce"}}'] == 1
        assert m[f'{errors}{{error="UNKNOWN_TOPIC_OR_PARTITION",request="DeleteTopics"}}'] == 1
        # every Produce request here named one partition: one error code each
        assert m[f'{errors}{{error="NONE",request="Produce"}}'] + 1 == \
            m['kafka_network_requestmetrics_total_time_seconds_count{request="Produce"}']
        assert m[f'{errors}{{error="NONE",request="Metadata"}}'] >= 1

        # a deleted topic's series go (Kafka removes its BrokerTopicMetrics)
        admin.delete_topics([topic_name])[topic_name].result(timeout=30)
        deadline = time.monotonic() + 30
        while any(f'topic="{topic_name}"' in k for k in samples(port)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [k for k in samples(port) if f'topic="{topic_name}"' in k] == []
    finally:
        assert b.stop() == 0
    assert "Traceback" not in b.log_text()
