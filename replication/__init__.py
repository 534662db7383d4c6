"""Replication (leaders, ISR, KIP-1176 fast-store followers). Arrives with the cluster issue; a single broker needs none."""
