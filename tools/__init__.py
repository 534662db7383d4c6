"""The admin command-line tools: clients of the Kafka protocol with Kafka's verbs, not part of the broker."""
