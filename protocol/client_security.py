"""How a client connection secures itself, from Kafka's client settings (`security.protocol`, `ssl.*`,
`sasl.mechanism`, `sasl.jaas.config`): the broker's own connections to other brokers and to the controller, and
Strata's tools (`--command-config`)."""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Callable

from protocol.client import ConnectionFailed
from protocol.tls import client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class AuthenticationFailed(ConnectionFailed):
    """The broker refused this client's credentials (SaslAuthenticate's error), or the SASL exchange broke: callers
    that retry connections retry it (a broker's credentials may arrive in the metadata log later)."""


@dataclass
class ClientSecurity:
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_client: Callable[[], object] | None = None      # a new protocol.sasl client per connection

    @classmethod
    def from_properties(cls, get: Callable[[str], str | None] | dict) -> "ClientSecurity | None":
        """None for PLAINTEXT (the default), as Kafka's clients default to it."""
        if isinstance(get, dict):
            get = get.get
        proto = (get("security.protocol") or "PLAINTEXT").strip().upper()
        if proto not in PROTOCOLS:
            raise ValueError(f"security.protocol={proto}: expected one of {', '.join(PROTOCOLS)}")
        if proto == "PLAINTEXT":
            return None
        sec = cls()
        if proto in ("SSL", "SASL_SSL"):
            sec.ssl_context = client_context(lambda k: get(k))
        if proto.startswith("SASL"):
            from protocol.sasl import client_from_config
            settings = {k: get(k) for k in ("sasl.mechanism", "sasl.jaas.config") if get(k)}
            client_from_config(settings)                     # bad settings fail here, not at first connect
            sec.sasl_mechanism = (settings.get("sasl.mechanism") or "GSSAPI").upper()
            sec.sasl_client = lambda: client_from_config(settings)
        return sec


def load_properties(path: str | None) -> dict[str, str]:
    """A client properties file (`--command-config`)."""
    if not path:
        return {}
    from protocol.properties import parse_properties
    with open(path) as f:
        return parse_properties(f.read())


def librdkafka_config(props: dict[str, str]) -> dict[str, str]:
    """Kafka's (Java) client security settings in librdkafka's names, so tools and the Spark connector built on
    confluent-kafka take the settings Kafka users already have: `sasl.jaas.config` becomes sasl.username and
    sasl.password (or librdkafka's unsecured OAUTHBEARER token), PEM truststores and keystores become
    ssl.ca.location / ssl.certificate.location / ssl.key.location. Other settings pass through unchanged."""
    out = dict(props)
    if "sasl.mechanism" in out:
        out["sasl.mechanisms"] = out.pop("sasl.mechanism")
    jaas = out.pop("sasl.jaas.config", None)
    if jaas:
        from protocol.sasl.jaas import single_entry
        opts = single_entry(jaas).options
        if "unsecuredLoginStringClaim_sub" in opts:
            out["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            out["sasl.oauthbearer.config"] = f"principal={opts['unsecuredLoginStringClaim_sub']}"
        else:
            for key in ("username", "password"):
                if key in opts:
                    out[f"sasl.{key}"] = opts[key]
    for java, native in (("ssl.truststore.location", "ssl.ca.location"), ("ssl.truststore.certificates", "ssl.ca.pem"),
                         ("ssl.keystore.key", "ssl.key.pem"), ("ssl.keystore.certificate.chain", "ssl.certificate.pem")):
        if java in out:
            out[native] = out.pop(java)
    if "ssl.keystore.location" in out:            # one PEM file with the key and its chain serves as both
        out["ssl.key.location"] = out["ssl.certificate.location"] = out.pop("ssl.keystore.location")
    for kind in ("ssl.truststore.type", "ssl.keystore.type"):
        value = out.pop(kind, "PEM")
        if value.upper() != "PEM":
            raise ValueError(f"{kind}={value}: only PEM stores can be used (see docs/security.md)")
    out.pop("ssl.keystore.password", None)
    out.pop("ssl.truststore.password", None)
    if out.get("ssl.endpoint.identification.algorithm", None) == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out
