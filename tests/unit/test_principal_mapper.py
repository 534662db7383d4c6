"""SslPrincipalMapper against Kafka's SslPrincipalMapperTest, and the DN text Java's X500Principal.getName() prints."""
from __future__ import annotations

import datetime
import ssl

import pytest

from protocol.sasl.principal_mapper import (NoMatchingRule, SslPrincipalMapper, java_regex, rfc2253_name,
                                            rfc2253_name_from_der, rfc2253_subject_from_cert_der)


# ---- Kafka's SslPrincipalMapperTest ----

@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    SslPrincipalMapper.from_rules(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules):
    with pytest.raises(ValueError):
        SslPrincipalMapper.from_rules(rules)


def test_ssl_principal_mapper():
    mapper = SslPrincipalMapper.from_rules(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.get_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.get_name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.get_name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.get_name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize("expected, rules", [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    # empty rules are ignored
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    # escape sequences
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    # rules rule
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected, rules):
    assert str(SslPrincipalMapper.from_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace():
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.get_name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


# ---- beyond Kafka's test: Java regex/replacement semantics ----

def test_no_matching_rule_and_default_rules():
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x, rules \\[RULE:\\^CN=y\\$/y\\]"):
        SslPrincipalMapper.from_rules("RULE:^CN=y$/y/").get_name("CN=x")
    assert SslPrincipalMapper.from_rules(None).get_name("CN=x,O=y") == "CN=x,O=y"


def test_java_replacement_syntax():
    dn = "CN=Duke,OU=Eng,O=Org"
    get = lambda rule: SslPrincipalMapper.from_rules(rule).get_name(dn)  # noqa: E731
    assert get("RULE:^CN=(.*?),OU=(.*?),.*$/$2-$1/") == "Eng-Duke"
    assert get("RULE:^CN=(.*?),.*$/$1-$5/") == "Duke-$5"          # Kafka's pre-pass: $5 past the last group
    assert get("RULE:^CN=(.*?),.*$/$12/") == "Duke2"              # Java takes the longest valid group number
    assert get("RULE:^CN=(?<who>[^,]*),.*$/${who}!/U") == "DUKE!"
    assert get("RULE:^CN=([^,]*),.*$/\\$1=$1/") == "$1=Duke"
    assert get("RULE:^\\QCN=Duke\\E,(.*)$/$1/") == "OU=Eng,O=Org"
    assert get("RULE:^CN=(\\p{Alpha}+),.*\\z/$1/L") == "duke"
    with pytest.raises(ValueError):
        get("RULE:^CN=.*$/$1/")                                     # no groups: Java's "No group 1"
    with pytest.raises(ValueError):
        SslPrincipalMapper.from_rules("RULE:^CN=(.*$/$1/")          # bad regex


def test_java_regex_translation():
    assert java_regex(r"(?<n>a)(?<=b)(?<!c)\Qa.b\E[]x]") == r"(?P<n>a)(?<=b)(?<!c)a\.b[]x]"
    with pytest.raises(ValueError):
        java_regex("[a-z&&[^b]]")


# ---- DN text ----

def _subject(*rdns):
    return tuple(tuple(rdn) for rdn in rdns)


def test_rfc2253_name_reverses_python_order():
    subject = _subject([("countryName", "US")], [("organizationName", "Acme")],
                       [("organizationalUnitName", "eng")], [("commonName", "alice")])
    assert rfc2253_name(subject) == "CN=alice,OU=eng,O=Acme,C=US"


@pytest.mark.parametrize("value, printed", [
    ("Smith, John", "Smith\\, John"),
    ("a+b=c", "a\\+b\\=c"),
    ('say "hi"', 'say \\"hi\\"'),
    ("back\\slash", "back\\\\slash"),
    ("<x>;y", "\\<x\\>\\;y"),
    ("#tag#", "\\#tag\\#"),
    (" padded  ", "\\ padded\\ \\ "),
    ("nul\0", "nul\\00"),
    ("héllo_*@", "héllo_*@"),
])
def test_rfc2253_escaping(value, printed):
    assert rfc2253_name(_subject([("commonName", value)])) == f"CN={printed}"


def test_rfc2253_non_keyword_attributes_are_hex_der():
    subject = _subject([("domainComponent", "com")], [("emailAddress", "alice@example.com")],
                       [("commonName", "alice"), ("userId", "a1")], [("serialNumber", "42")],
                       [("streetAddress", "Main St")], [("stateOrProvinceName", "CA")], [("localityName", "SF")])
    assert rfc2253_name(subject) == ("L=SF,ST=CA,STREET=Main St,2.5.4.5=#13023432,CN=alice+UID=a1,"
                                     "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,DC=com")


def _certificate(tmp_path, attributes):
    """A self-signed certificate (DER) and Python's getpeercert()-style subject for it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.RelativeDistinguishedName(rdn) for rdn in attributes])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(12345).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    pem = tmp_path / "cert.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert.public_bytes(serialization.Encoding.DER), ssl._ssl._test_decode_cert(str(pem))["subject"], name


def test_der_and_tuple_paths_agree_on_a_real_certificate(tmp_path):
    from cryptography.x509 import NameAttribute
    from cryptography.x509.oid import NameOID as N
    der, subject, name = _certificate(tmp_path, [
        [NameAttribute(N.DOMAIN_COMPONENT, "org")], [NameAttribute(N.COUNTRY_NAME, "US")],
        [NameAttribute(N.ORGANIZATION_NAME, "Acme, Inc.")], [NameAttribute(N.ORGANIZATIONAL_UNIT_NAME, "eng")],
        [NameAttribute(N.COMMON_NAME, "alice"), NameAttribute(N.USER_ID, "u1")],
        [NameAttribute(N.EMAIL_ADDRESS, "alice@example.com")], [NameAttribute(N.SERIAL_NUMBER, "7")],
        [NameAttribute(N.GIVEN_NAME, "Alice")]])
    expected = ("2.5.4.42=#0c05416c696365,2.5.4.5=#130137,"
                "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,"
                "CN=alice+UID=u1,OU=eng,O=Acme\\, Inc.,C=US,DC=org")
    assert rfc2253_subject_from_cert_der(der) == expected
    assert rfc2253_name_from_der(name.public_bytes()) == expected
    assert rfc2253_name(subject) == expected


def test_der_path_prints_non_string_values_as_hex(tmp_path):
    from cryptography.x509 import NameAttribute
    from cryptography.x509.name import _ASN1Type
    from cryptography.x509.oid import NameOID as N
    der, _, _ = _certificate(tmp_path, [[NameAttribute(N.COMMON_NAME, "bob", _type=_ASN1Type.UniversalString)]])
    assert rfc2253_subject_from_cert_der(der) == "CN=#1c0c000000620000006f00000062"


def test_mapping_a_certificate_subject(tmp_path):
    from cryptography.x509 import NameAttribute
    from cryptography.x509.oid import NameOID as N
    der, _, _ = _certificate(tmp_path, [[NameAttribute(N.ORGANIZATION_NAME, "Acme")],
                                        [NameAttribute(N.COMMON_NAME, "Svc-Account")]])
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=([^,]+),O=Acme$/$1/L,DEFAULT")
    assert mapper.get_name(rfc2253_subject_from_cert_der(der)) == "svc-account"
