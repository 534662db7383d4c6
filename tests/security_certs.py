"""Certificates for the security tests: a CA, a broker certificate for 127.0.0.1/localhost and client certificates,
as PEM files (Strata reads PEM stores), made with `cryptography` in a few milliseconds."""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(**parts) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "C": NameOID.COUNTRY_NAME}
    # Java prints most specific first (CN=...,OU=...,O=...,C=...): the certificate lists them the other way round
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(list(parts.items()))])


@dataclass
class Pem:
    cert: Path
    key: Path
    keystore: Path          # key + chain in one file: ssl.keystore.location with ssl.keystore.type=PEM


class CertificateAuthority:
    def __init__(self, root: Path, name: str = "Strata Test CA"):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(CN=name, O="Strata")
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.ca_file = self.root / "ca.pem"              # ssl.truststore.location with ssl.truststore.type=PEM
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, file_name: str, *, password: str | None = None, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
              **subject) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        sans = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h) for h in hosts]
        cert = (x509.CertificateBuilder().subject_name(_name(**subject)).issuer_name(self.name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .sign(self.key, hashes.SHA256()))
        enc = (serialization.BestAvailableEncryption(password.encode()) if password
               else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        pem = Pem(self.root / f"{file_name}.crt", self.root / f"{file_name}.key", self.root / f"{file_name}.pem")
        pem.cert.write_bytes(cert_pem)
        pem.key.write_bytes(key_pem)
        pem.keystore.write_bytes(key_pem + cert_pem + self.cert.public_bytes(serialization.Encoding.PEM))
        return pem
