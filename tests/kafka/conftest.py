"""Apache Kafka beside Strata: fixtures for the suites that run Kafka's Java clients, tools and brokers.

`kafka_jars` resolves the pinned jars (deploy/apache-kafka/resolve.sh) once and skips, with the reason, only when
java or mvn is absent. `apache_kafka` is one real KRaft Apache Kafka broker and `strata` one Strata broker, both
shared by a session; `strata_cluster` / `kafka_cluster` are three of each (RF=3), shared by a module."""
from __future__ import annotations

import pytest

from tests import apache_kafka as ak
from tests.cluster.conftest import Cluster, stop_and_check
from tests.conftest import BrokerProcess


@pytest.fixture(scope="session")
def kafka_jars() -> None:
    reason = ak.skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def apache_kafka(kafka_jars, tmp_path_factory):
    c = ak.KafkaCluster(tmp_path_factory.mktemp("apache-kafka"), 1).start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def strata(tmp_path_factory):
    """One Strata broker for the Kafka suites (its own, so their topics do not meet other suites')."""
    b = BrokerProcess(tmp_path_factory.mktemp("strata-for-kafka"),
                      {"group.initial.rebalance.delay.ms": "0"}).start()   # as the Kafka fixtures run
    yield b
    rc = b.stop()
    assert rc == 0, f"broker exited with {rc}:\n{b.log_text()[-3000:]}"
    assert "Traceback" not in b.log_text(), b.log_text()[-5000:]


@pytest.fixture(scope="module")
def strata_cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("strata-cluster"), 3).start()
    yield c
    stop_and_check(c)


@pytest.fixture(scope="module")
def kafka_cluster(kafka_jars, tmp_path_factory):
    c = ak.KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), 3).start()
    yield c
    c.stop()
