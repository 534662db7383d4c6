"""Java .properties files, the subset Kafka's configs use: `key=value` or `key: value`, `#`/`!` comments, blank
lines, and a trailing backslash continuing a line (how `sasl.jaas.config` is usually split)."""
from __future__ import annotations


def parse_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    lines: list[str] = []
    continued = False
    for raw in text.splitlines():
        line = raw.strip()
        if continued:
            lines[-1] = lines[-1][:-1] + line
        elif line and line[0] not in "#!":
            lines.append(line)
        else:
            continue
        continued = lines[-1].endswith("\\") and not lines[-1].endswith("\\\\")
    for line in lines:
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ValueError(f"config line has no '=': {line!r}")
        out[line[:sep].strip()] = line[sep + 1:].strip()
    return out
