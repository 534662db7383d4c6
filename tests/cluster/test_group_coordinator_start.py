"""A restarting cluster member listens (the controller's traffic may come to it) before its group coordinator knows
which `__consumer_offsets` partitions it leads. An OffsetFetch in that window once answered "no committed offset"
without an error, and Kafka's TransactionalMessageCopier, resetting to its committed position after an abort, started
over from the beginning of its input: every record copied so far was copied twice (tests/kafka/
test_transactional_copier.py found it). Every answer must be the committed offset or an error that sends the client
to the coordinator again; ListGroups then answers COORDINATOR_NOT_AVAILABLE."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from tests.cluster.helpers import create
from tests.integration.rawclient import RawClient

RETRIABLE = {14, 15, 16}     # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _ask(bootstrap: str, group: str, topic: str) -> tuple[tuple[int, int, int], int] | None:
    """((group error, partition error, committed offset) of an OffsetFetch, ListGroups' error) from this broker
    itself, or None if it does not answer."""
    try:
        with RawClient(bootstrap, timeout=2) as raw:
            r = raw.request(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                                   "require_stable": True})
            listed = raw.request(16, 4, {"states_filter": []})
    except (OSError, Exception):
        return None
    p = r.topics[0].partitions[0] if r.topics else None
    return (r.error_code, (p.error_code if p else -1), (p.committed_offset if p else -1)), listed.error_code


def test_a_starting_broker_never_answers_no_committed_offset(cluster, topic_name):
    create(cluster, topic_name, 1, 3)
    group = "g-" + topic_name
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic_name, 0, 42)], asynchronous=False)
    c.close()
    answers, list_errors = [], set()
    for victim in cluster.brokers.values():
        victim.kill9()
        victim.start()                              # returns as soon as it listens
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            a = _ask(victim.bootstrap, group, topic_name)
            if a is not None:
                answers.append(a[0])
                list_errors.add(a[1])
        cluster.wait_for_brokers(len(cluster.brokers))

    def right(a) -> bool:
        group_error, partition_error, offset = a
        return group_error in RETRIABLE or (group_error == 0 and (partition_error, offset) in ((0, 42), (88, -1)))
    wrong = [a for a in answers if not right(a)]
    assert answers and not wrong, f"{len(wrong)} of {len(answers)} answers neither 42 nor retriable: {wrong[:5]}"
    # ListGroups before the coordinator started: COORDINATOR_NOT_AVAILABLE (as Kafka), not an empty list
    assert list_errors <= {0, 14, 15} and 15 in list_errors, list_errors
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "isolation.level": "read_committed"})
    assert c.committed([TopicPartition(topic_name, 0)], timeout=30)[0].offset == 42
    c.close()
