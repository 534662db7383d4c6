"""A broker's security set-up, built once at start from its config: the listeners and what they advertise, each
SSL listener's TLS context and certificate-to-principal mapping, and how this broker secures its own connections to
other brokers (the inter-broker listener, `sasl.mechanism.inter.broker.protocol`) and to the controller
(`controller.listener.names`, `sasl.mechanism.controller.protocol`)."""
from __future__ import annotations

from dataclasses import dataclass

from broker.security.listeners import ListenerConfig, enabled_mechanisms, listener_setting, mechanism_setting
from protocol.client_security import ClientSecurity
from protocol.sasl.principal_mapper import SslPrincipalMapper
from protocol.tls import client_context, peer_subject, server_context


@dataclass
class SaslListener:
    """A SASL listener's mechanisms, each a factory of new servers built once (Kafka's SaslChannelBuilder)."""
    factories: dict
    reauth_ms: int
    max_receive: int


class BrokerSecurity:
    def __init__(self, config):
        self.config = config
        self.topics = None                     # the broker's MetadataCache, for SCRAM credentials (set by the broker)
        self.jwks_refreshes: list = []         # (url, JwksValidator, seconds) of JWKS fetched from an endpoint
        self.listeners = ListenerConfig.from_config(config)
        self.server_contexts = {}
        self.mappers = {}
        self.sasl: dict[str, SaslListener] = {}
        for lst in self.listeners.listeners:
            if lst.sasl:
                from broker.security.sasl_authenticator import mechanism_factory
                self.sasl[lst.name] = SaslListener(
                    {m: mechanism_factory(_Owner(self), lst.name, m) for m in enabled_mechanisms(config, lst.name)},
                    int(listener_setting(config, lst.name, "connections.max.reauth.ms") or 0),
                    int(config.get("sasl.server.max.receive.size")))
            if lst.ssl:
                get = self._getter(lst.name)
                if lst.sasl:        # Kafka asks SASL_SSL clients for certificates only if the listener itself says so
                    get = self._sasl_ssl_getter(lst.name)
                self.server_contexts[lst.name] = server_context(get)
                self.mappers[lst.name] = SslPrincipalMapper.from_rules(get("ssl.principal.mapping.rules") or "DEFAULT")
        self.inter_broker = self.client_security(self.listeners.inter_broker, "sasl.mechanism.inter.broker.protocol")
        # without controller.listener.names the controller is reached like any broker, with the same mechanism
        self.controller = self.client_security(self.listeners.controller, "sasl.mechanism.controller.protocol") \
            if config.get("controller.listener.names").strip() else self.inter_broker

    async def refresh_jwks(self) -> None:
        """Fetch each JWKS endpoint again every sasl.oauthbearer.jwks.endpoint.refresh.ms (Kafka's
        RefreshingHttpsJwks), so keys an identity provider rotates in are accepted; a failed fetch keeps the keys
        it has and is retried at the next period."""
        import asyncio
        import logging

        from broker.security.sasl_authenticator import fetch_jwks

        async def one(url, validator, period):
            while True:
                await asyncio.sleep(period)
                try:
                    validator.update(await asyncio.to_thread(fetch_jwks, url))
                except Exception as e:
                    logging.getLogger("strata.security").warning("refreshing the JWKS from %s failed: %s", url, e)
        await asyncio.gather(*(one(*r) for r in self.jwks_refreshes))

    def _getter(self, listener: str):
        return lambda key: listener_setting(self.config, listener, key)

    def _sasl_ssl_getter(self, listener: str):
        def get(key: str) -> str:
            if key == "ssl.client.auth":
                return self.config.get(f"listener.name.{listener.lower()}.ssl.client.auth") or "none"
            return listener_setting(self.config, listener, key)
        return get

    def ssl_principal(self, listener: str, ssl_object) -> str:
        """"User:<mapped subject>" for a verified client certificate, else User:ANONYMOUS (Kafka's
        DefaultKafkaPrincipalBuilder on an SSL channel)."""
        subject = peer_subject(ssl_object)
        if subject is None:
            return "User:ANONYMOUS"
        return "User:" + self.mappers[listener].get_name(subject)

    def client_security(self, listener_name: str, mechanism_key: str) -> ClientSecurity | None:
        """How this broker connects to `listener_name` on its peers: that listener's protocol, its truststore and
        keystore (the broker's own certificate, for mutual TLS), and for SASL the mechanism named by
        `mechanism_key` with the username and password of the listener's JAAS config for it."""
        lst = self.listeners.by_name(listener_name)
        if lst.security_protocol == "PLAINTEXT":
            return None
        sec = ClientSecurity()
        if lst.ssl:
            sec.ssl_context = client_context(self._getter(lst.name))
        if lst.sasl:
            from protocol.sasl import client_from_config
            mechanism = self.config.get(mechanism_key).strip().upper()
            settings = {"sasl.mechanism": mechanism,
                        "sasl.jaas.config": mechanism_setting(self.config, lst.name, mechanism, "sasl.jaas.config")}
            client_from_config(settings)           # fails at start-up when the broker has no credentials for it
            sec.sasl_mechanism = mechanism
            sec.sasl_client = lambda: client_from_config(settings)
        return sec


class _Owner:
    """What a mechanism factory reads from the broker before the broker exists: its config, and (for SCRAM) the
    metadata image through `topics`, bound once the broker sets `security.topics`."""

    def __init__(self, security: BrokerSecurity):
        self._security = security
        self.config = security.config

    @property
    def topics(self):
        return self._security.topics

    @property
    def jwks_refreshes(self) -> list:
        return self._security.jwks_refreshes
