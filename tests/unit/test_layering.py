"""The layers, bottom up: protocol <- storage <- metadata <- replication <- broker. A module imports only from its own
layer or the ones below (function-level imports included); a lower layer gets what it needs from a higher one as a
narrow interface (a callback, a Protocol). The Spark connector is a client: it may use protocol and storage (it
reads the object store directly), never the broker's internals."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["protocol", "storage", "metadata", "replication", "broker"]
ALLOWED = {name: set(LAYERS[:i + 1]) for i, name in enumerate(LAYERS)}
ALLOWED["spark_connector"] = {"protocol", "storage", "spark_connector"}
PACKAGES = set(ALLOWED)


def imported_packages(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every import of one of our packages in `source`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        out += [(node.lineno, n.split(".")[0]) for n in names if n.split(".")[0] in PACKAGES]
    return out


def violations(package: str, source: str, where: str) -> list[str]:
    return [f"{where}:{line} ({package}) imports {target}" for line, target in imported_packages(source)
            if target not in ALLOWED[package]]


def test_no_module_imports_from_a_layer_above_it():
    found = []
    for package in ALLOWED:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += violations(package, path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "imports against the layering:\n" + "\n".join(found)


def test_handlers_reach_data_only_through_the_partition_layer():
    """Handlers decode, validate, call replication/ (Partition, ReplicaManager), encode: no log, remote tier, object
    store or cleaner. Topic config definitions (storage.log.log_config) are validation, so they are allowed."""
    found = []
    for path in sorted((ROOT / "broker" / "handlers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [f"{path.name}:{node.lineno} imports {m}" for m in mods
                      if m.startswith("storage") and m != "storage.log.log_config"]
    assert not found, "\n".join(found)


def test_the_check_sees_module_and_function_level_imports():
    src = "import storage.log.log\ndef f():\n    from replication.partition import Partition\n"
    assert violations("storage", src, "x.py") == ["x.py:3 (storage) imports replication"]
    assert violations("broker", src, "x.py") == []
    assert violations("protocol", "from broker import cli\n", "y.py") == ["y.py:1 (protocol) imports broker"]
