"""Cluster metadata: topics, partitions, topic ids and configs."""
