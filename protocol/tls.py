"""TLS contexts from Kafka's SSL settings (PEM only: `ssl.keystore.type=PEM` / `ssl.truststore.type=PEM`), for the
broker's listeners and for clients (inter-broker connections, the admin CLI). Settings are read through a getter
so the broker can resolve per-listener overrides and a client can pass its properties file.

Keystores: `ssl.keystore.location` (a PEM file with the private key and the certificate chain) with
`ssl.key.password` for an encrypted key, or the inline `ssl.keystore.key` and `ssl.keystore.certificate.chain`.
Truststores: `ssl.truststore.location` (PEM certificates) or the inline `ssl.truststore.certificates`. JKS and PKCS12
stores are not read: convert them with keytool/openssl (docs/security.md)."""
from __future__ import annotations

import os
import ssl
import tempfile
from typing import Callable

Getter = Callable[[str], str]

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _check_type(get: Getter, key: str, has_store: bool) -> None:
    kind = (get(key) or "JKS").strip().upper()
    if has_store and kind != "PEM":
        raise ValueError(f"{key}={kind}: Strata reads PEM stores only (set {key}=PEM; see docs/security.md)")


def _load_keystore(ctx: ssl.SSLContext, get: Getter) -> bool:
    location, inline_key = get("ssl.keystore.location"), get("ssl.keystore.key")
    _check_type(get, "ssl.keystore.type", bool(location or inline_key))
    password = get("ssl.key.password") or None
    if location:
        ctx.load_cert_chain(location, password=password)
        return True
    if inline_key:
        chain = get("ssl.keystore.certificate.chain")
        if not chain:
            raise ValueError("ssl.keystore.key is set without ssl.keystore.certificate.chain")
        # ssl loads chains from files only: a private file that exists only while it is read
        fd, path = tempfile.mkstemp(prefix="strata-keystore-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(inline_key.strip() + "\n" + chain.strip() + "\n")
            ctx.load_cert_chain(path, password=password)
        finally:
            os.unlink(path)
        return True
    return False


def _load_truststore(ctx: ssl.SSLContext, get: Getter) -> bool:
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    _check_type(get, "ssl.truststore.type", bool(location or inline))
    if location:
        ctx.load_verify_locations(cafile=location)
        return True
    if inline:
        ctx.load_verify_locations(cadata=inline)
        return True
    return False


def _protocols(ctx: ssl.SSLContext, get: Getter) -> None:
    enabled = [p.strip() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    versions = [_PROTOCOLS[p] for p in enabled if p in _PROTOCOLS]
    if not versions:
        raise ValueError(f"ssl.enabled.protocols={','.join(enabled)}: none of TLSv1.2, TLSv1.3")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        ctx.set_ciphers(":".join(c.strip() for c in ciphers.split(",")))


def server_context(get: Getter) -> ssl.SSLContext:
    """A listener's context; `ssl.client.auth` none | requested | required as Kafka's."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, get)
    if not _load_keystore(ctx, get):
        raise ValueError("an SSL listener needs a keystore: ssl.keystore.location (PEM) or ssl.keystore.key and "
                         "ssl.keystore.certificate.chain")
    auth = (get("ssl.client.auth") or "none").strip().lower()
    if auth not in ("none", "requested", "required"):
        raise ValueError(f"ssl.client.auth={auth}: expected none, requested or required")
    if auth != "none":
        if not _load_truststore(ctx, get):
            raise ValueError(f"ssl.client.auth={auth} needs a truststore to check client certificates")
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def client_context(get: Getter) -> ssl.SSLContext:
    """A client's context: the truststore (else the system's CAs), an optional keystore for mutual TLS, and host
    name checking unless `ssl.endpoint.identification.algorithm` is empty (Kafka's switch for it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, get)
    if not _load_truststore(ctx, get):
        ctx.load_default_certs()
    _load_keystore(ctx, get)
    algorithm = get("ssl.endpoint.identification.algorithm")
    ctx.check_hostname = (algorithm if algorithm is not None else "https").strip().lower() == "https"
    return ctx


def peer_subject(ssl_object) -> str | None:
    """The verified client certificate's subject as Java's X500Principal.getName() prints it (RFC 2253: most
    specific first, unknown attributes as OID=#hex), what `ssl.principal.mapping.rules` are written against; None
    without a client certificate."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from protocol.sasl.principal_mapper import rfc2253_subject_from_cert_der
    return rfc2253_subject_from_cert_der(der)
