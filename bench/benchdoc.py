"""Writing a benchmark's results into docs/benchmarks.md: each script owns one marked block and one section."""
from __future__ import annotations

from pathlib import Path


def write_results(doc: Path, begin: str, end: str, block: str, section: str = "", before: str | None = None) -> None:
    """Replace the block from `begin` to `end` (`block` carries both markers). The file is read right now, so sections
    that other scripts or people changed meanwhile survive. Without the markers, `section` + `block` is inserted
    before the heading line `before` when there is one, else appended."""
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        doc.write_text(pre + block + rest.split(end, 1)[1])
        return
    added = section + block + "\n"
    anchor = f"\n{before}\n" if before else None
    if anchor and anchor in text:
        i = text.index(anchor) + 1
        doc.write_text(text[:i] + added + "\n" + text[i:])
    else:
        doc.write_text(text.rstrip("\n") + "\n\n" + added)
