"""Broker security: listeners, authentication (SASL, TLS principals) and authorization (ACLs)."""
