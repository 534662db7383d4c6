"""Kafka's `sasl.jaas.config` / `listener.name.*.sasl.jaas.config` syntax, parsed as Kafka's JaasConfig does.

    <loginModuleClass> <controlFlag> (<optionName>=<optionValue>)*; [more entries]

Kafka tokenizes with java.io.StreamTokenizer (slash-slash and slash-star comments on, '-', '_', '$' added as word
characters), and the quirks users meet follow from that, so we emulate it rather than writing a friendlier grammar:
values with spaces or '=' must be quoted ("a b"); a value starting with a digit, '.' or '-' is a *number* token and
is rejected unless quoted (`option1=3` fails, `option1="3"` works); a quoted string takes Java escapes (\\n, \\t,
octal \\101) and ends silently at a line end; a lone '/' starts a comment.
"""
from __future__ import annotations

from typing import NamedTuple

_EOF, _WORD, _NUMBER = "EOF", "WORD", "NUMBER"
_DIGITS = "0123456789"
_ESCAPES = {"a": "\x07", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\x0b"}
_FLAGS = ("required", "requisite", "sufficient", "optional")
DISALLOWED_LOGIN_MODULES = ("com.sun.security.auth.module.JndiLoginModule",)   # Kafka's default


class JaasEntry(NamedTuple):
    login_module: str
    control_flag: str   # "required", "requisite", "sufficient" or "optional"
    options: dict[str, str]


def _is_word_char(c: str) -> bool:
    """StreamTokenizer's CT_ALPHA after Kafka's setup (digits, '.' and '-' continue a word but start a number)."""
    return ("a" <= c <= "z" or "A" <= c <= "Z" or "\u00a0" <= c <= "\u00ff" or c in "_$-" or ord(c) >= 256)


class _Tokenizer:
    """java.io.StreamTokenizer with Kafka's settings; `next()` returns (ttype, sval) where ttype is _EOF, _WORD,
    _NUMBER, a quote character or the ordinary character itself, and sval is None except for words and quotes."""

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def _skip_line(self, j: int) -> None:
        while j < len(self.s) and self.s[j] not in "\r\n":
            j += 1
        self.i = j

    def next(self) -> tuple[str, str | None]:
        s, n = self.s, len(self.s)
        while True:
            while self.i < n and self.s[self.i] <= " ":
                self.i += 1
            if self.i >= n:
                return _EOF, None
            i, c = self.i, s[self.i]
            if c in _DIGITS or c in ".-":
                if c == "-" and (i + 1 >= n or (s[i + 1] != "." and s[i + 1] not in _DIGITS)):
                    self.i = i + 1
                    return "-", None
                j, seen_dot = (i + 1 if c == "-" else i), False
                while j < n and (s[j] in _DIGITS or (s[j] == "." and not seen_dot)):
                    seen_dot |= s[j] == "."
                    j += 1
                self.i = j
                return _NUMBER, None
            if _is_word_char(c):
                j = i + 1
                while j < n and (_is_word_char(s[j]) or s[j] in _DIGITS or s[j] == "."):
                    j += 1
                self.i = j
                return _WORD, s[i:j]
            if c in "\"'":
                return c, self._quoted(c)
            if c == "/":
                if i + 1 < n and s[i + 1] == "*":
                    end = s.find("*/", i + 2)
                    if end < 0:
                        self.i = n
                        return _EOF, None
                    self.i = end + 2
                else:   # "//" or a lone '/', which is StreamTokenizer's default comment character
                    self._skip_line(i + 2)
                continue
            self.i = i + 1
            return c, None

    def _quoted(self, quote: str) -> str:
        s, n = self.s, len(self.s)
        out, j = [], self.i + 1
        while j < n and s[j] != quote and s[j] not in "\r\n":
            c, j = s[j], j + 1
            if c == "\\":
                if j >= n:
                    out.append("\uffff")   # Java appends (char) -1 for a backslash at the very end
                    break
                first, j = s[j], j + 1
                if "0" <= first <= "7":
                    code = ord(first) - 48
                    if j < n and "0" <= s[j] <= "7":
                        code, j = code * 8 + ord(s[j]) - 48, j + 1
                        if j < n and "0" <= s[j] <= "7" and first <= "3":
                            code, j = code * 8 + ord(s[j]) - 48, j + 1
                    c = chr(code)
                else:
                    c = _ESCAPES.get(first, first)
            out.append(c)
        self.i = j + 1 if j < n and s[j] == quote else j
        return "".join(out)


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """All entries of a JAAS config string; ValueError with Kafka's message on bad syntax."""
    tok = _Tokenizer(text)
    entries = []
    while True:
        ttype, sval = tok.next()
        if ttype == _EOF:
            break
        entries.append(_parse_entry(tok, sval))
    if not entries:
        raise ValueError("Login module not specified in JAAS config")
    return entries


def _parse_entry(tok: _Tokenizer, login_module: str | None) -> JaasEntry:
    ttype, flag = tok.next()
    if ttype == _EOF:
        raise ValueError("Login module control flag not specified in JAAS config")
    if flag is None:
        raise ValueError("Login module control flag is not available in the JAAS config")
    if flag.upper().lower() not in _FLAGS:   # Java: flag.toUpperCase(Locale.ROOT) against REQUIRED...
        raise ValueError(f"Invalid login module control flag '{flag}' in JAAS config")
    options: dict[str, str] = {}
    while True:
        ttype, key = tok.next()
        if ttype in (_EOF, ";"):
            break
        if tok.next()[0] != "=":
            raise ValueError(f"Value not specified for key '{_java(key)}' in JAAS config")
        vtype, value = tok.next()
        if vtype == _EOF or value is None:
            raise ValueError(f"Value not specified for key '{_java(key)}' in JAAS config")
        if key is None:   # Java would store a null key; no option name can be looked up as null
            raise ValueError(f"Option name missing before value '{value}' in JAAS config")
        options[key] = value
    if ttype != ";":
        raise ValueError("JAAS config entry not terminated by semi-colon")
    if not login_module:  # javax.security.auth.login.AppConfigurationEntry's check
        raise ValueError("Login module name not specified in JAAS config")
    return JaasEntry(login_module, flag.upper().lower(), options)


def _java(value: str | None) -> str:
    return "null" if value is None else value


def single_entry(text: str, disallowed: tuple[str, ...] = DISALLOWED_LOGIN_MODULES) -> JaasEntry:
    """The one entry a `sasl.jaas.config` property must hold (Kafka's JaasContext.load), refusing login modules
    Kafka disallows by default (org.apache.kafka.disallowed.login.modules)."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise ValueError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    name = entries[0].login_module.strip()
    if name in {d.strip() for d in disallowed}:
        raise ValueError(f"{name} is not allowed. Update System property "
                         f"'org.apache.kafka.disallowed.login.modules' to allow {name}")
    return entries[0]
