"""Listeners as Kafka configures them: `listeners`, `advertised.listeners`, `listener.security.protocol.map`,
`inter.broker.listener.name` / `security.inter.broker.protocol` and `controller.listener.names`, with per-listener
overrides under `listener.name.<name>.` (Kafka's ListenerName.configPrefix) for TLS and SASL settings."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocol.sasl import MECHANISMS          # the mechanisms protocol/sasl implements: one list

log = logging.getLogger("strata.security")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default map: every security protocol is also a listener name for itself
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)

SECURITY_DEFAULTS: dict[str, str] = {
    "listener.security.protocol.map": DEFAULT_PROTOCOL_MAP,
    "inter.broker.listener.name": "",
    "security.inter.broker.protocol": "PLAINTEXT",
    "controller.listener.names": "",
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "sasl.mechanism.controller.protocol": "GSSAPI",
    "sasl.server.max.receive.size": "524288",
    "connections.max.reauth.ms": "0",
    "connections.max.idle.ms": "600000",
    "connection.failed.authentication.delay.ms": "100",
    "ssl.keystore.type": "JKS",
    "ssl.truststore.type": "JKS",
    "ssl.client.auth": "none",
    "ssl.principal.mapping.rules": "DEFAULT",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.protocol": "TLSv1.3",
    "ssl.cipher.suites": "",
    # GSSAPI's settings, with Kafka's defaults: shown and (as in Kafka) changeable at run time, without effect here,
    # since Strata has no Kerberos; kept so Kafka's tools and tests that set them (librdkafka's 0081) work
    **{"sasl.kerberos.service.name": "", "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
       "sasl.kerberos.ticket.renew.window.factor": "0.8", "sasl.kerberos.ticket.renew.jitter": "0.05",
       "sasl.kerberos.min.time.before.relogin": "60000", "sasl.kerberos.principal.to.local.rules": "DEFAULT"},
    "authorizer.class.name": "",
    "super.users": "",
    "allow.everyone.if.no.acl.found": "false",
}


@dataclass(frozen=True)
class Listener:
    name: str                       # upper case, as Kafka's ListenerName.normalised
    host: str
    port: int
    security_protocol: str

    @property
    def ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_listeners(text: str, protocol_map: dict[str, str], what: str = "listeners") -> list[Listener]:
    """`NAME://host:port,...` (an empty host binds all interfaces, as in Kafka); every name must be in the map."""
    out: list[Listener] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if "://" not in item:
            item = "PLAINTEXT://" + item            # Strata's earlier `host:port` form
        name, rest = item.split("://", 1)
        name = name.strip().upper()
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{what}: {item!r} is not NAME://host:port")
        host = host.strip("[]")
        if name not in protocol_map:
            raise ValueError(f"{what}: listener {name} is not in listener.security.protocol.map "
                             f"({','.join(f'{k}:{v}' for k, v in protocol_map.items())})")
        if any(existing.name == name for existing in out):
            raise ValueError(f"{what}: listener {name} is named twice")
        out.append(Listener(name, host, int(port), protocol_map[name]))
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    out = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or proto not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {item!r} does not map a name to one of "
                             f"{', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = proto
    return out


@dataclass
class ListenerConfig:
    """The broker's listeners, what it advertises, and which it uses to reach other brokers and the controller."""
    listeners: list[Listener]
    advertised: list[Listener]
    inter_broker: str                          # listener name
    controller: str                            # listener name the controller channel uses
    props: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config) -> "ListenerConfig":
        pmap = parse_protocol_map(config.get("listener.security.protocol.map"))
        listeners = parse_listeners(config.get("listeners"), pmap)
        if not listeners:
            raise ValueError("listeners: no listener configured")
        names = [lst.name for lst in listeners]
        adv_text = config.get("advertised.listeners").strip()
        if adv_text:                            # Kafka: advertised.listeners replaces listeners, names a subset
            advertised = parse_listeners(adv_text, pmap, "advertised.listeners")
            for a in advertised:
                if a.name not in names:
                    raise ValueError(f"advertised.listeners: {a.name} is not one of the listeners ({', '.join(names)})")
                if a.host in ("", "0.0.0.0", "::"):
                    raise ValueError(f"advertised.listeners: {a.name} cannot advertise the meta-address {a.host!r}")
        else:                                   # Strata advertises a listener bound to all interfaces as 127.0.0.1
            advertised = [Listener(lst.name, "127.0.0.1" if lst.host in ("", "0.0.0.0", "::") else lst.host,
                                   lst.port, lst.security_protocol) for lst in listeners]
        inter = config.get("inter.broker.listener.name").strip().upper()
        if not inter:
            proto = config.get("security.inter.broker.protocol").strip().upper()
            inter = proto if proto in names else names[0]   # Kafka requires the named listener; Strata falls back
        if inter not in names:
            raise ValueError(f"inter.broker.listener.name={inter} is not one of the listeners ({', '.join(names)})")
        if inter not in {a.name for a in advertised}:
            raise ValueError(f"advertised.listeners must include the inter-broker listener {inter}")
        controller_names = [n.strip().upper() for n in config.get("controller.listener.names").split(",") if n.strip()]
        controller = next((n for n in controller_names if n in names), inter)
        return cls(listeners, advertised, inter, controller)

    def by_name(self, name: str) -> Listener:
        return next(lst for lst in self.listeners if lst.name == name)

    def advertised_of(self, name: str) -> Listener:
        return next(a for a in self.advertised if a.name == name)


def listener_setting(config, listener: str, key: str) -> str:
    """A setting for one listener: `listener.name.<name>.<key>` wins over `<key>` (Kafka's per-listener configs)."""
    own = config.get(f"listener.name.{listener.lower()}.{key}")
    return own if own not in (None, "") else config.get(key)


def mechanism_setting(config, listener: str, mechanism: str, key: str) -> str:
    """A SASL setting for one mechanism of one listener: `listener.name.<name>.<mechanism>.<key>` first (how Kafka
    names `sasl.jaas.config` per mechanism), then the listener's, then the broker-wide one."""
    own = config.get(f"listener.name.{listener.lower()}.{mechanism.lower()}.{key}")
    return own if own not in (None, "") else listener_setting(config, listener, key)


def enabled_mechanisms(config, listener: str) -> list[str]:
    wanted = [m.strip().upper() for m in listener_setting(config, listener, "sasl.enabled.mechanisms").split(",")
              if m.strip()]
    unsupported = [m for m in wanted if m not in MECHANISMS]
    if unsupported:
        log.warning("listener %s: SASL mechanism(s) %s not supported (supported: %s); handshakes for them fail",
                    listener, ", ".join(unsupported), ", ".join(MECHANISMS))
    return [m for m in wanted if m in MECHANISMS]
