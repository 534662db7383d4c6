"""Kafka's `ssl.principal.mapping.rules` (SslPrincipalMapper) and the certificate DN string those rules run on.

Rules are written by Kafka users against Java's regex and replacement syntax and against the DN text Java prints
(X500Principal.getName(), RFC 2253), so both are reproduced here: the rule splitter/parser use Kafka's own regexes,
rule patterns are Java regexes translated to Python's `re` (named groups, \\Q..\\E, \\z/\\Z, POSIX \\p{..}; ASCII
\\w\\d\\s as in Java), replacements use Java's $n / ${name} / \\x syntax with Kafka's "treat a $n past the last group as
literal" pre-pass (bug for bug: it inserts its backslashes at positions from the unmodified string).

DN text: Python's getpeercert() gives the subject in certificate order (most general first) with decoded values,
Java prints the RDNs reversed (most specific first), escapes ,=+<>#;"\\ (and NUL as \\00, leading/trailing space as
"\\ "), and prints attributes without an RFC 2253 keyword (everything but CN C L ST O OU STREET DC UID, e.g.
emailAddress) as <oid>=#<hex of the DER value>. From the decoded tuple the DER string type must be guessed (IA5String
for emailAddress, PrintableString for serialNumber/dnQualifier/countryName codes, else UTF8String); from the
certificate's DER (getpeercert(binary_form=True)) `rfc2253_subject_from_cert_der` is exact.
"""
from __future__ import annotations

import re

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)", re.ASCII)
_PARSER = re.compile(_RULE, re.ASCII)
_BACK_REFERENCE = re.compile(r"\$(\d+)", re.ASCII)
_JAVA_TRIM = "".join(map(chr, range(33)))
_POSIX = {"Lower": "a-z", "Upper": "A-Z", "ASCII": r"\x00-\x7f", "Alpha": "a-zA-Z", "Digit": "0-9",
          "Alnum": "a-zA-Z0-9", "Punct": r"!-/:-@\[-`{-~", "Graph": "!-~", "Print": " -~", "Blank": r" \t",
          "Cntrl": r"\x00-\x1f\x7f", "XDigit": "0-9a-fA-F", "Space": r" \t\n\x0b\f\r"}
DEFAULT_RULES = "DEFAULT"


class NoMatchingRule(Exception):
    """No rule applies to a DN (Kafka's SslPrincipalMapper.NoMatchingRule)."""


def java_regex(pattern: str) -> str:
    """A Java regex in Python `re` syntax (compile with re.ASCII); ValueError for constructs with no equivalent."""
    out, i, n, in_class = [], 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            d = pattern[i + 1]
            if d == "Q":
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end
                out.append(re.escape(pattern[i + 2:end]))
                i = end + 2
            elif d in "pP" and pattern.startswith("{", i + 2):
                close = pattern.find("}", i + 3)
                name = pattern[i + 3:close if close >= 0 else n].removeprefix("Is")
                if close < 0 or name not in _POSIX or (in_class and d == "P"):
                    raise ValueError(f"unsupported Java regex property \\{d}{{{name}}}")
                out.append(_POSIX[name] if in_class else f"[{'^' if d == 'P' else ''}{_POSIX[name]}]")
                i = close + 1
            else:
                out.append({"z": r"\Z", "Z": r"(?=\n?\Z)"}.get(d, pattern[i:i + 2]) if not in_class
                           else pattern[i:i + 2])
                i += 2
            continue
        if in_class:
            if c == "[" or pattern.startswith("&&", i):
                raise ValueError("nested or intersected character classes are not supported")
            in_class = c != "]"
            out.append(c)
            i += 1
        elif c == "[":
            j = i + 1 + (pattern.startswith("^", i + 1))
            j += pattern.startswith("]", j)          # a ']' first in a class is literal in both dialects
            out.append(pattern[i:j])
            in_class, i = True, j
        elif pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _escape_literal_back_references(unescaped: str, groups: int) -> str:
    """Kafka's (from NiFi) escapeLiteralBackReferences, including its use of stale offsets after an insertion."""
    if groups == 0:
        return unescaped
    value = unescaped
    for m in _BACK_REFERENCE.finditer(unescaped):
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        if len(digits) > 10 or int(digits) >= 2 ** 31:
            raise ValueError(f'For input string: "{digits}"')   # Java's Integer.parseInt
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = m.start(1)
            value = value[:start - 1] + "\\" + value[start - 1:]
    return value


def _expand(m: re.Match, replacement: str) -> str:
    """java.util.regex.Matcher's replacement expansion: \\x is a literal x, $n takes the longest valid group number,
    ${name} a named group; an unmatched group expands to nothing."""
    out, i, n, groups = [], 0, len(replacement), m.re.groups
    while i < n:
        c = replacement[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i + 1])
            i += 2
        elif c == "$":
            i += 1
            if i >= n:
                raise ValueError("Illegal group reference: group index is missing")
            if replacement[i] == "{":
                j = i + 1
                while j < n and replacement[j].isascii() and replacement[j].isalnum():
                    j += 1
                name = replacement[i + 1:j]
                if not name or j >= n or replacement[j] != "}":
                    raise ValueError("named capturing group is missing or has no trailing '}'")
                if name[0].isdigit() or name not in m.re.groupindex:
                    raise ValueError(f"No group with name {{{name}}}")
                ref, i = m.re.groupindex[name], j + 1
            else:
                if not "0" <= replacement[i] <= "9":
                    raise ValueError("Illegal group reference")
                ref, i = ord(replacement[i]) - 48, i + 1
                while i < n and "0" <= replacement[i] <= "9" and ref * 10 + ord(replacement[i]) - 48 <= groups:
                    ref, i = ref * 10 + ord(replacement[i]) - 48, i + 1
                if ref > groups:
                    raise ValueError(f"No group {ref}")
            out.append(m.group(ref) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Rule:
    def __init__(self, pattern: str | None = None, replacement: str | None = None, case: str = ""):
        self.pattern, self.replacement, self.case = pattern, replacement, case
        if pattern is not None:
            try:
                self.regex = re.compile(java_regex(pattern), re.ASCII)
            except (re.error, ValueError) as e:
                raise ValueError(f"Invalid rule pattern `{pattern}`: {e}") from e

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.regex.fullmatch(dn):
            return None
        replacement = _escape_literal_back_references(self.replacement, self.regex.groups)
        result = self.regex.sub(lambda m: _expand(m, replacement), dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern}/{self.replacement}" + (f"/{self.case}" if self.case else "")


class SslPrincipalMapper:
    def __init__(self, rules: list[_Rule]):
        self.rules = rules

    @classmethod
    def from_rules(cls, text: str | None) -> "SslPrincipalMapper":
        """Parse `ssl.principal.mapping.rules`; ValueError ("Invalid rule: ...") as Kafka's IllegalArgumentException."""
        text = DEFAULT_RULES if text is None else text
        rules = []
        for m in _SPLITTER.finditer(text.strip(_JAVA_TRIM)):
            rule = m.group(1)
            p = _PARSER.match(rule)
            if not p:
                raise ValueError(f"Invalid rule: {rule}")
            if p.end() != len(rule):
                raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[p.end():]}`")
            if p.group(1) is not None:
                rules.append(_Rule())
            elif p.group(2) is not None:   # empty rules are ignored
                rules.append(_Rule(p.group(2), p.group(4), p.group(6)))
        return cls(rules)

    def get_name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


# ---- the DN string of X500Principal.getName() ----

_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
             "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}
_OPENSSL_NAMES = {  # OpenSSL long (and common short) names, as Python's getpeercert() reports attribute types
    "commonName": "2.5.4.3", "CN": "2.5.4.3", "surname": "2.5.4.4", "serialNumber": "2.5.4.5",
    "countryName": "2.5.4.6", "C": "2.5.4.6", "localityName": "2.5.4.7", "L": "2.5.4.7",
    "stateOrProvinceName": "2.5.4.8", "ST": "2.5.4.8", "streetAddress": "2.5.4.9", "street": "2.5.4.9",
    "organizationName": "2.5.4.10", "O": "2.5.4.10", "organizationalUnitName": "2.5.4.11", "OU": "2.5.4.11",
    "title": "2.5.4.12", "description": "2.5.4.13", "businessCategory": "2.5.4.15", "postalAddress": "2.5.4.16",
    "postalCode": "2.5.4.17", "postOfficeBox": "2.5.4.18", "telephoneNumber": "2.5.4.20", "name": "2.5.4.41",
    "givenName": "2.5.4.42", "initials": "2.5.4.43", "generationQualifier": "2.5.4.44",
    "x500UniqueIdentifier": "2.5.4.45", "dnQualifier": "2.5.4.46", "pseudonym": "2.5.4.65", "role": "2.5.4.72",
    "organizationIdentifier": "2.5.4.97", "emailAddress": "1.2.840.113549.1.9.1",
    "unstructuredName": "1.2.840.113549.1.9.2", "domainComponent": "0.9.2342.19200300.100.1.25",
    "DC": "0.9.2342.19200300.100.1.25", "userId": "0.9.2342.19200300.100.1.1", "UID": "0.9.2342.19200300.100.1.1",
    "jurisdictionLocalityName": "1.3.6.1.4.1.311.60.2.1.1",
    "jurisdictionStateOrProvinceName": "1.3.6.1.4.1.311.60.2.1.2",
    "jurisdictionCountryName": "1.3.6.1.4.1.311.60.2.1.3"}
_GUESSED_TAG = {"1.2.840.113549.1.9.1": 0x16, "2.5.4.5": 0x13, "2.5.4.46": 0x13,
                "1.3.6.1.4.1.311.60.2.1.3": 0x13, "0.9.2342.19200300.100.1.25": 0x16}
_STRING_TAGS = {0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E}   # AVA.isDerString: UTF8 Printable T61 IA5 General BMP


def _escape_value(value: str) -> str:
    """AVA.toRFC2253String's escaping of a string value."""
    s = "".join("\\" + c if c in ',=+<>#;"\\' else "\\00" if c == "\0" else c for c in value)
    lead = len(s) - len(s.lstrip(" \r"))
    trail = len(s.rstrip(" \r"))
    return "".join("\\" + c if k < lead or k >= trail else c for k, c in enumerate(s))


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes(
        (n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + content


def rfc2253_name(subject) -> str:
    """Java's X500Principal.getName() for a getpeercert()['subject'] tuple: ((('countryName', 'US'),), ...)."""
    rdns = []
    for rdn in subject:
        avas = []
        for attr, value in rdn:
            oid = _OPENSSL_NAMES.get(attr) or (attr if re.fullmatch(r"[0-2](\.[0-9]+)+", attr) else None)
            if oid is None:
                raise ValueError(f"Unknown attribute type {attr!r} in certificate subject")
            if oid in _KEYWORDS:
                avas.append(f"{_KEYWORDS[oid]}={_escape_value(value)}")
            else:
                tag = _GUESSED_TAG.get(oid, 0x0C) if value.isascii() else 0x0C
                avas.append(f"{oid}=#{_der(tag, value.encode()).hex()}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _tlv(data: bytes, pos: int, expect: int | None = None) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise ValueError("truncated DER")
    tag, length, pos = data[pos], data[pos + 1], pos + 2
    if expect is not None and tag != expect:
        raise ValueError(f"DER tag {tag:#x} where {expect:#x} was expected")
    if length & 0x80:
        k = length & 0x7F
        if not 0 < k <= 4 or pos + k > len(data):
            raise ValueError("bad DER length")
        length, pos = int.from_bytes(data[pos:pos + k], "big"), pos + k
    if pos + length > len(data):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _oid(content: bytes) -> str:
    arcs, value = [], 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


def rfc2253_name_from_der(name_der: bytes) -> str:
    """Java's X500Principal.getName() for a DER-encoded X.501 Name (exact: the value types are known)."""
    _, pos, end = _tlv(name_der, 0, 0x30)
    rdns = []
    while pos < end:
        _, q, set_end = _tlv(name_der, pos, 0x31)
        avas = []
        while q < set_end:
            _, s, ava_end = _tlv(name_der, q, 0x30)
            _, o, oid_end = _tlv(name_der, s, 0x06)
            oid = _oid(name_der[o:oid_end])
            tag, v, v_end = _tlv(name_der, oid_end)
            keyword = _KEYWORDS.get(oid)
            if keyword is None or tag not in _STRING_TAGS:
                avas.append(f"{keyword or oid}=#{name_der[oid_end:v_end].hex()}")
            else:   # Java decodes the content bytes as UTF-8 whatever the string type
                avas.append(f"{keyword}={_escape_value(name_der[v:v_end].decode('utf-8', 'replace'))}")
            q = ava_end
        rdns.append("+".join(avas))
        pos = set_end
    return ",".join(reversed(rdns))


def rfc2253_subject_from_cert_der(cert_der: bytes) -> str:
    """The subject DN of a DER certificate (ssl.SSLSocket.getpeercert(binary_form=True)) as Java prints it."""
    _, pos, _ = _tlv(cert_der, 0, 0x30)          # Certificate
    _, pos, _ = _tlv(cert_der, pos, 0x30)        # TBSCertificate
    if cert_der[pos] == 0xA0:                    # [0] version
        pos = _tlv(cert_der, pos)[2]
    for _ in range(4):                           # serialNumber, signature, issuer, validity
        pos = _tlv(cert_der, pos)[2]
    end = _tlv(cert_der, pos, 0x30)[2]
    return rfc2253_name_from_der(cert_der[pos:end])
