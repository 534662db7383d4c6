#!/usr/bin/env bash
# Resolves the pinned Apache Kafka jars (pom.xml) and Spark's own Kafka source (spark-kafka-pom.xml) with mvn into
# ~/.m2 and writes their classpaths to .cache/apache-kafka/ (ignored by git). `make test` and bench/vs_kafka.py call
# it; it does nothing when the classpaths are newer than the poms. Without java or mvn it says so and exits 0: the
# suites that need Kafka then skip with that reason.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="$ROOT/.cache/apache-kafka"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
mkdir -p "$OUT"
for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "resolve.sh: $tool not found; the Apache Kafka suites will skip" >&2
    echo "$tool not found" > "$OUT/missing"
    exit 0
  fi
done
rm -f "$OUT/missing"

if [ ! -s "$OUT/classpath.txt" ] || [ "$HERE/pom.xml" -nt "$OUT/classpath.txt" ]; then
  mvn -B -q -f "$HERE/pom.xml" dependency:build-classpath -Dmdep.outputFile="$OUT/classpath.txt.tmp"
  mv "$OUT/classpath.txt.tmp" "$OUT/classpath.txt"
fi

if [ ! -s "$OUT/spark-classpath.txt" ] || [ "$HERE/spark-kafka-pom.xml" -nt "$OUT/spark-classpath.txt" ]; then
  # The installed PySpark's version first; Maven Central may not have that release's Kafka source yet.
  SPARK="$("$PYTHON" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)"
  if [ -n "$SPARK" ] && mvn -B -q -f "$HERE/spark-kafka-pom.xml" dependency:build-classpath \
        -Dspark.version="$SPARK" -Dmdep.outputFile="$OUT/spark-classpath.txt.tmp" >/dev/null 2>&1; then
    echo "$SPARK" > "$OUT/spark-version.txt"
  else
    mvn -B -q -f "$HERE/spark-kafka-pom.xml" dependency:build-classpath -Dmdep.outputFile="$OUT/spark-classpath.txt.tmp"
    sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$HERE/spark-kafka-pom.xml" > "$OUT/spark-version.txt"
    echo "resolve.sh: spark-sql-kafka-0-10 ${SPARK:-?} is not on Maven Central; using $(cat "$OUT/spark-version.txt")" >&2
  fi
  mv "$OUT/spark-classpath.txt.tmp" "$OUT/spark-classpath.txt"
fi
