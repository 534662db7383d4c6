"""TLS contexts from Kafka's SSL settings (protocol/tls.py), checked with real handshakes on loopback: PEM files and
the inline PEM settings, an encrypted key, ssl.client.auth none / requested / required, the subject as Java prints
it, host name checking, and stores Strata cannot read."""
from __future__ import annotations

import asyncio
import ssl

import pytest

from protocol.tls import client_context, peer_subject, server_context
from tests.security_certs import CertificateAuthority


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("tls"))
    return ca, ca.issue("server", password="pw", CN="localhost", O="Strata"), ca.issue("client", CN="alice", OU="eng")


async def handshake(server_ctx, client_ctx, host="localhost"):
    """Connect once; the server side's view of the client's certificate subject (None without one)."""
    seen = asyncio.get_running_loop().create_future()

    async def on_client(reader, writer):
        if not seen.done():
            seen.set_result(peer_subject(writer.get_extra_info("ssl_object")))
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                                   server_hostname=host), 5)
        result = await asyncio.wait_for(seen, 5)
        writer.close()
        return result
    finally:
        server.close()


def settings(**kv):
    d = {k.replace("_", "."): v for k, v in kv.items()}
    return d.get


async def test_pem_files_and_client_auth(pki):
    ca, srv, cli = pki
    base = dict(ssl_keystore_type="PEM", ssl_keystore_location=str(srv.keystore), ssl_key_password="pw",
                ssl_truststore_type="PEM", ssl_truststore_location=str(ca.ca_file))
    trusting = client_context(settings(ssl_truststore_type="PEM", ssl_truststore_location=str(ca.ca_file)))
    with_cert = client_context(settings(ssl_truststore_type="PEM", ssl_truststore_location=str(ca.ca_file),
                                        ssl_keystore_type="PEM", ssl_keystore_location=str(cli.keystore)))
    assert await handshake(server_context(settings(**base)), with_cert) is None          # none: not asked
    requested = server_context(settings(**base, ssl_client_auth="requested"))
    assert await handshake(requested, trusting) is None
    assert await handshake(requested, with_cert) == "CN=alice,OU=eng"
    required = server_context(settings(**base, ssl_client_auth="required"))
    assert await handshake(required, with_cert) == "CN=alice,OU=eng"
    with pytest.raises((ssl.SSLError, ConnectionError, asyncio.TimeoutError)):
        await handshake(required, trusting)


async def test_inline_pem_settings(pki):
    ca, srv, _ = pki
    key_and_chain = srv.keystore.read_text()
    key = key_and_chain[:key_and_chain.index("-----BEGIN CERTIFICATE-----")]
    chain = key_and_chain[len(key):]
    server = server_context(settings(ssl_keystore_type="PEM", ssl_keystore_key=key, ssl_key_password="pw",
                                     ssl_keystore_certificate_chain=chain))
    client = client_context(settings(ssl_truststore_type="PEM", ssl_truststore_certificates=ca.ca_file.read_text()))
    assert await handshake(server, client) is None


async def test_host_name_checking(pki):
    ca, srv, _ = pki
    server = server_context(settings(ssl_keystore_type="PEM", ssl_keystore_location=str(srv.keystore),
                                     ssl_key_password="pw"))
    checking = client_context(settings(ssl_truststore_type="PEM", ssl_truststore_location=str(ca.ca_file)))
    with pytest.raises(ssl.SSLCertVerificationError):
        await handshake(server, checking, host="not-this-host.example")
    lenient = client_context(settings(ssl_truststore_type="PEM", ssl_truststore_location=str(ca.ca_file),
                                      ssl_endpoint_identification_algorithm=""))
    assert await handshake(server, lenient, host="not-this-host.example") is None


@pytest.mark.parametrize("kv, message", [
    ({"ssl.keystore.location": "/x/broker.jks"}, "reads PEM stores only"),
    ({"ssl.keystore.type": "PEM"}, "needs a keystore"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "k"}, "without ssl.keystore.certificate.chain"),
    ({"ssl.enabled.protocols": "SSLv3"}, "none of TLSv1.2, TLSv1.3"),
])
def test_bad_settings(kv, message):
    with pytest.raises(ValueError, match=message):
        server_context(kv.get)
