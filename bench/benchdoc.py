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


def seconds_main(script: str, run, table, doc: Path, begin: str, end: str, section: str) -> None:
    """The command line of a benchmark measured for `--seconds` per phase: print `table(run(seconds))`, and with
    `--write` put it in `doc` between the markers, with the command and the date."""
    import argparse
    import os
    import time
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    t = table(run(args.seconds))
    print(t)
    if args.write:
        block = f"{begin}\n{t}\n\n(`bench/{script} --seconds {args.seconds:g}`, {time.strftime('%Y-%m-%d')}, " \
                f"{os.cpu_count()} cores)\n{end}"
        write_results(doc, begin, end, block, section)
