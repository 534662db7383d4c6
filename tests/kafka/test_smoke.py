"""The Apache Kafka fixtures themselves: Kafka's topic tool lists a topic it created, on Kafka and on Strata."""
from tests import apache_kafka as ak


def test_kafka_topic_tool_on_both(apache_kafka, strata, kafka_jars, topic_name):
    for bootstrap in (apache_kafka.bootstrap, strata.bootstrap):
        ak.run("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create", "--topic",
               topic_name, "--partitions", "2", "--replication-factor", "1")
        listed = ak.run("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--list").stdout
        assert topic_name in listed.split(), (bootstrap, listed)
