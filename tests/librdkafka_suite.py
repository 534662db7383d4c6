"""librdkafka's own test suite (its tests/ directory, the `test-runner` program) built once and run against Strata.

The source is Debian's pristine copy of the release tarball (`librdkafka_<version>.orig.tar.gz` in Debian's pool),
pinned by sha256, because CI reaches Debian's archive but not GitHub. The C++ transaction test 0098 needs RapidJSON
(headers only), taken the same way from Debian's `rapidjson-dev` package and unpacked under .cache/ (no system
install, no root). Everything is downloaded and built once under .cache/librdkafka/:

    librdkafka_2.8.0.orig.tar.gz, rapidjson-dev_*.deb   the pinned downloads
    rapidjson/usr/include/rapidjson/                     the unpacked headers
    librdkafka-2.8.0/                                    the source tree, configured and built in place:
        src/librdkafka.so.1, src-cpp/librdkafka++.so.1, tests/test-runner, tests/java/*.class
    kafka-path/                                          a stand-in for a Kafka release: bin/kafka-run-class.sh runs
                                                         java with the Maven-resolved classpath of tests/apache_kafka.py,
                                                         bin/kafka-acls.sh: Kafka's AclCommand (0115, 0119),
                                                         libs/ links kafka-clients (for tests/java/Makefile)

The library is configured with OpenSSL (the system's libssl: SCRAM, SASL_SSL, and 0081's AlterUserScramCredentials,
which without it fails in the client with _INVALID_ARG), but no SASL/GSSAPI, libcurl or zstd (no test run here uses
them); zlib is the system's, lz4 the bundled copy.

    .venv/bin/python -m tests.librdkafka_suite build
    .venv/bin/python -m tests.librdkafka_suite run 0103 --bootstrap 127.0.0.1:9092

`tests/kafka/test_librdkafka_suite.py` runs the tests against a Strata cluster.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "librdkafka"

VERSION = "2.8.0"
SOURCE_URL = f"http://deb.debian.org/debian/pool/main/libr/librdkafka/librdkafka_{VERSION}.orig.tar.gz"
SOURCE_SHA256 = "5bd1c46f63265f31c6bfcedcde78703f77d28238eadf23821c2b43fc30be3e25"
RAPIDJSON_URL = "http://deb.debian.org/debian/pool/main/r/rapidjson/rapidjson-dev_1.1.0%2bdfsg2-7.1_all.deb"
RAPIDJSON_SHA256 = "37d2bd2dd97e3f8a25d9d27958ba22dfed13550a515852cc30434e538b9f47a3"

SRC = CACHE / f"librdkafka-{VERSION}"
TESTS_DIR = SRC / "tests"
TEST_RUNNER = TESTS_DIR / "test-runner"
RAPIDJSON_INCLUDE = CACHE / "rapidjson" / "usr" / "include"
KAFKA_PATH = CACHE / "kafka-path"
CONFIGURE_ARGS = ["--enable-ssl", "--disable-gssapi", "--disable-curl", "--disable-zstd", "--disable-lz4-ext",
                  "--enable-zlib", "--disable-syslog"]
# Fixes to the release's tests, applied to the unpacked source before building: (file under
# tests/, the text, its replacement). Each must match exactly once. All but the last are from librdkafka's commit
# c96a820 ("Additional test fixes", first released in 2.9.0), which made the tests pass against Apache Kafka 4.0 in
# KRaft mode.
TEST_PATCHES = [
    # A topic just created may still be unknown to the brokers a new client asks next: test_wait_metadata_update
    # first waits a second (2.8.0 did so only in test_wait_topic_exists). Without it 0081's DescribeConsumerGroups
    # subscribed a consumer ~0.1 s after the admin client saw the topic, and the consumer's first Metadata answer,
    # from another broker, was UNKNOWN_TOPIC_OR_PART ("Subscribed topic not available"), which fails the test.
    ("test.c",
     """        rd_kafka_t *our_rk = NULL;

        if (!rk)
                rk = our_rk = test_create_handle(RD_KAFKA_PRODUCER, NULL);
""",
     """        rd_kafka_t *our_rk = NULL;

        /* Wait an additional second for the topic to propagate in
         * the cluster. This is not perfect but a cheap workaround for
         * the asynchronous nature of topic creations in Kafka.
         * Sleeping comes before the full metadata requests because otherwise
         * those requests can trigger rejoins in case of
         * regex subscriptions. */
        rd_sleep(1);

        if (!rk)
                rk = our_rk = test_create_handle(RD_KAFKA_PRODUCER, NULL);
"""),
    ("test.c",
     """        test_wait_metadata_update(rk, &topics, 1, NULL, 0, tmout);

        /* Wait an additional second for the topic to propagate in
         * the cluster. This is not perfect but a cheap workaround for
         * the asynchronous nature of topic creations in Kafka. */
        rd_sleep(1);
}
""",
     """        test_wait_metadata_update(rk, &topics, 1, NULL, 0, tmout);
}
"""),
    # 0081's DescribeConsumerGroups with authorized operations expected a group's operations to be READ, DESCRIBE and
    # DELETE, as before Apache Kafka 4.0; 4.x adds DESCRIBE_CONFIGS and ALTER_CONFIGS (KIP-848's group configs;
    # Kafka's AclEntry.supportedOperations(GROUP)), and c96a820 expects the five from broker version 4.0 on.
    ("0081-admin.c",
     """                const rd_kafka_AclOperation_t expected[] = {
                    RD_KAFKA_ACL_OPERATION_DELETE,
                    RD_KAFKA_ACL_OPERATION_DESCRIBE,
                    RD_KAFKA_ACL_OPERATION_READ};
                authorized_operations =
                    rd_kafka_ConsumerGroupDescription_authorized_operations(
                        results[0], &authorized_operations_cnt);
                test_match_authorized_operations(expected, 3,
                                                 authorized_operations,
                                                 authorized_operations_cnt);
""",
     """                const rd_kafka_AclOperation_t expected_ak3[] = {
                    RD_KAFKA_ACL_OPERATION_DELETE,
                    RD_KAFKA_ACL_OPERATION_DESCRIBE,
                    RD_KAFKA_ACL_OPERATION_READ};
                const rd_kafka_AclOperation_t expected_ak4[] = {
                    RD_KAFKA_ACL_OPERATION_DELETE,
                    RD_KAFKA_ACL_OPERATION_DESCRIBE,
                    RD_KAFKA_ACL_OPERATION_READ,
                    RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
                    RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS};
                authorized_operations =
                    rd_kafka_ConsumerGroupDescription_authorized_operations(
                        results[0], &authorized_operations_cnt);
                if (test_broker_version < TEST_BRKVER(4, 0, 0, 0))
                        test_match_authorized_operations(
                            expected_ak3, 3, authorized_operations,
                            authorized_operations_cnt);
                else
                        test_match_authorized_operations(
                            expected_ak4, 5, authorized_operations,
                            authorized_operations_cnt);
"""),
    # Not from c96a820: 0061 fails at random on any broker. Statistics are made on librdkafka's main thread and
    # queued ahead of messages (RD_KAFKA_PRIO_HIGH); a snapshot taken while consume() was handing message N to the
    # application (popped, stored offset not yet advanced) is served at the next consume(), after the test has
    # moved calc_lag on, and shows a lag one higher (CI on 2026-11-28: "Stats consumer_lag 13, expected 12", the
    # broker's LSO unchanged). Such a snapshot is accepted; any other value still fails. Upstream's later 0061
    # accepts any lag not below the expected one.
    ("0061-consumer_lag.cpp",
     """    } else if (consumer_lag != calc_lag)
""",
     """    } else if (consumer_lag != calc_lag && consumer_lag != calc_lag + 1)
"""),
]
_PATCHES_SHA256 = hashlib.sha256(repr(TEST_PATCHES).encode()).hexdigest()
# What a finished build was made from: a different pin, configuration or patch rebuilds from scratch.
BUILD_STAMP = f"{SOURCE_SHA256} {RAPIDJSON_SHA256} {' '.join(CONFIGURE_ARGS)} {_PATCHES_SHA256}\n"
JOBS = "2"     # a 2-core machine that also runs other suites


class DownloadError(RuntimeError):
    """A pinned file could not be downloaded (no network to Debian's archive): the suite skips with this."""


class BuildError(RuntimeError):
    """The source is here but did not build: a failure, never a skip."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(url: str, sha256: str) -> Path:
    """The pinned file in .cache/librdkafka/, downloaded once; a wrong checksum is an error, not a skip."""
    name = urllib.request.url2pathname(url.rsplit("/", 1)[1])
    dest = CACHE / name
    if dest.exists() and _sha256(dest) == sha256:
        return dest
    CACHE.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f)
    except OSError as e:
        part.unlink(missing_ok=True)
        raise DownloadError(f"cannot download {url}: {e}") from e
    got = _sha256(part)
    if got != sha256:
        part.unlink()
        raise BuildError(f"{url}: sha256 {got}, expected {sha256}")
    part.rename(dest)
    return dest


def _run(cmd: list[str], cwd: Path, log: Path, env: dict | None = None) -> None:
    """A build step at the lowest CPU priority, its output appended to `log`; raises with the log's tail."""
    with open(log, "ab") as out:
        out.write(f"\n$ (cd {cwd} && {' '.join(cmd)})\n".encode())
        out.flush()
        p = subprocess.run(["nice", "-n", "19", *cmd], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                           env={**os.environ, **(env or {})})
    if p.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({p.returncode}) in {cwd}:\n{log.read_text(errors='replace')[-6000:]}")


def _unpack_deb(deb: Path, dest: Path) -> None:
    """`dpkg-deb -x` without dpkg: a .deb is an ar archive holding data.tar.*."""
    data = deb.read_bytes()
    assert data.startswith(b"!<arch>\n"), deb
    pos = 8
    while pos < len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            import io
            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                _extract(t, str(dest), "data")
            return
        pos += 60 + size + (size & 1)
    raise BuildError(f"{deb}: no data.tar member")


def _write_kafka_path() -> None:
    """A KAFKA_PATH for the tests' Java helpers (java/run-class.sh runs `$KAFKA_PATH/bin/kafka-run-class.sh CLASS`
    with CLASSPATH set to tests/java; java/Makefile compiles against `$KAFKA_PATH/libs/kafka-clients-*.jar`), made
    of the jars tests/apache_kafka.py resolves through Maven."""
    from tests import apache_kafka as ak
    reason = ak.skip_reason()
    if reason:
        raise DownloadError(reason)
    clients = [j for j in ak.classpath().split(":") if Path(j).name.startswith("kafka-clients-")]
    if not clients:
        raise BuildError("no kafka-clients jar in .cache/apache-kafka/classpath.txt")
    libs = KAFKA_PATH / "libs"
    bin_dir = KAFKA_PATH / "bin"
    shutil.rmtree(KAFKA_PATH, ignore_errors=True)
    libs.mkdir(parents=True)
    bin_dir.mkdir()
    (libs / Path(clients[0]).name).symlink_to(clients[0])
    script = bin_dir / "kafka-run-class.sh"
    script.write_text(
        "#!/bin/sh\n"
        "# Stand-in for Apache Kafka's bin/kafka-run-class.sh: CLASSPATH (tests/java) first, then Kafka's jars.\n"
        f'exec java {" ".join(ak.TOOL_JVM)} -cp "${{CLASSPATH:+$CLASSPATH:}}$(cat {ak.CACHE / "classpath.txt"})" "$@"\n')
    script.chmod(0o755)
    acls = bin_dir / "kafka-acls.sh"     # Kafka 4's bin/kafka-acls.sh: test_kafka_cmd("kafka-acls.sh ...")
    acls.write_text('#!/bin/sh\nexec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.AclCommand "$@"\n')
    acls.chmod(0o755)


def _extract(tar: tarfile.TarFile, dest: str, kind: str) -> None:
    if hasattr(tarfile, "data_filter"):           # Python 3.11.4+: refuse links and paths outside `dest`
        tar.extractall(dest, filter=kind)
    else:
        tar.extractall(dest)


def build(log=print) -> Path:
    """Download (once), configure and build librdkafka and its test-runner; the test-runner's path. Raises
    DownloadError when a download is impossible, BuildError when anything else fails."""
    stamp = SRC / ".strata-build"
    if TEST_RUNNER.exists() and stamp.exists() and stamp.read_text() == BUILD_STAMP:
        return TEST_RUNNER
    tarball = download(SOURCE_URL, SOURCE_SHA256)
    deb = download(RAPIDJSON_URL, RAPIDJSON_SHA256)
    if not (RAPIDJSON_INCLUDE / "rapidjson" / "schema.h").exists():
        shutil.rmtree(CACHE / "rapidjson", ignore_errors=True)
        _unpack_deb(deb, CACHE / "rapidjson")

    started = time.monotonic()
    shutil.rmtree(SRC, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp, tarfile.open(tarball) as t:
        _extract(t, tmp, "tar")
        (Path(tmp) / SRC.name).rename(SRC)
    for name, text, replacement in TEST_PATCHES:
        path = TESTS_DIR / name
        source = path.read_text()
        if source.count(text) != 1:
            raise BuildError(f"{path}: the text to patch occurs {source.count(text)} times, not once")
        path.write_text(source.replace(text, replacement))
    blog = CACHE / "build.log"
    blog.write_text("")
    log(f"building librdkafka {VERSION} in {SRC} (log: {blog})")
    # -isystem: RapidJSON 1.1.0 trips g++ 12's deprecation warnings, and the configure check compiles with -Werror.
    _run(["./configure", *CONFIGURE_ARGS], SRC, blog, {"CPPFLAGS": f"-isystem {RAPIDJSON_INCLUDE}"})
    if "WITH_RAPIDJSON=\ty" not in (SRC / "Makefile.config").read_text():
        raise BuildError(f"configure did not find RapidJSON in {RAPIDJSON_INCLUDE}: 0098 would skip itself")
    _run(["make", f"-j{JOBS}", "libs"], SRC, blog)
    _run(["make", f"-j{JOBS}", "test-runner"], TESTS_DIR, blog)
    stamp.write_text(BUILD_STAMP)
    log(f"built in {time.monotonic() - started:.0f}s")
    return TEST_RUNNER


def build_java_helpers() -> None:
    """The Java programs of tests/java (0098 runs TransactionProducerCli), compiled against the Maven-resolved
    kafka-clients, and the KAFKA_PATH stand-in that runs them. Raises DownloadError when Kafka's jars cannot be
    had (no java or mvn: tests/apache_kafka.py's skip reason)."""
    _write_kafka_path()
    _run(["make", "-C", "java", f"KAFKA_PATH={KAFKA_PATH}"], TESTS_DIR, CACHE / "build.log")


@dataclass
class RunResult:
    test: str
    returncode: int | None          # None: killed after the timeout
    output: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.returncode == 0

    @property
    def plain(self) -> str:
        """The output without the runner's colour codes."""
        return re.sub(r"\x1b\[[0-9;]*m", "", self.output)

    def summary(self) -> dict[str, str]:
        """The runner's closing table: test name -> PASSED / FAILED / SKIPPED / ..."""
        rows = re.findall(r"^\|\s*(\d{4}\w*)\s*\|\s*([A-Z]+)\s*\|", self.plain, re.M)
        return dict(rows)

    def failures(self, context: int = 3) -> str:
        """The lines that say why the runner failed, each with a few lines before it."""
        lines = [line for line in self.plain.splitlines() if "test(s) running" not in line]
        keep: set[int] = set()
        for i, line in enumerate(lines):
            if re.search(r"TEST FAILURE|failed at |assertion failed|Test assertion|FAIL:|Exception", line):
                keep.update(range(max(0, i - context), i + 1))
        return "\n".join(lines[i] for i in sorted(keep))


def run(test: str, bootstrap: str, work_dir: Path, timeout: float = 600,
        kafka_version: str = "4.0.0", extra_conf: dict[str, str] | None = None,
        extra_env: dict[str, str] | None = None) -> RunResult:
    """Run one test (`TESTS=<number>`) with the built test-runner against `bootstrap`. The runner's own
    config file is written into `work_dir`; output is combined stdout and stderr."""
    work_dir.mkdir(parents=True, exist_ok=True)
    conf = {"bootstrap.servers": bootstrap, "test.topic.random": "true", **(extra_conf or {})}
    conf_path = work_dir / f"test-{test}.conf"
    conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    env = {k: v for k, v in os.environ.items() if k != "CI"}     # CI=... would change the runner's timeouts
    env.update({
        "TESTS": test, "RDKAFKA_TEST_CONF": str(conf_path), "TEST_KAFKA_VERSION": kafka_version,
        "TEST_LEVEL": "2", "KAFKA_PATH": str(KAFKA_PATH), "BROKERS": bootstrap,
        "RDKAFKA_GITVER": f"v{VERSION}",
        "LD_LIBRARY_PATH": f"{SRC / 'src'}:{SRC / 'src-cpp'}", **(extra_env or {})})
    started = time.monotonic()
    # -p1: one test at a time (the runner's default runs several concurrently and raises the timeout multiplier).
    with open(work_dir / f"test-{test}.out", "w+b") as out:
        p = subprocess.Popen([str(TEST_RUNNER), "-p1"], cwd=TESTS_DIR, env=env, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            rc = None
        out.seek(0)
        text = out.read().decode(errors="replace")
    for stats in TESTS_DIR.glob(f"stats_{test}*.json"):      # the statistics the C++ tests write into their cwd
        stats.unlink(missing_ok=True)
    return RunResult(test, rc, text, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build")
    r = sub.add_parser("run")
    r.add_argument("tests", nargs="+")
    r.add_argument("--bootstrap", required=True)
    r.add_argument("--kafka-version", default="4.0.0")
    r.add_argument("--work-dir", type=Path, default=CACHE / "runs")
    args = ap.parse_args(argv)
    build()
    try:
        build_java_helpers()
    except DownloadError as e:
        print(f"no Java helpers (0098 cannot run): {e}", file=sys.stderr)
    if args.cmd == "build":
        print(TEST_RUNNER)
        return 0
    failed = 0
    for t in args.tests:
        res = run(t, args.bootstrap, args.work_dir, kafka_version=args.kafka_version)
        print(res.output)
        print(f"{t}: exit {res.returncode} in {res.seconds:.0f}s {res.summary()}")
        failed += not res.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
