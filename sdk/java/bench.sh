#!/usr/bin/env bash
# The Java library's benchmark: builds the library and its tests, then runs Bench (its
# own Redis and `turnstile serve`: TURNSTILE_BIN, else target/release/turnstile).
#   bash bench.sh [TASKS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")"
export TURNSTILE_BIN="${TURNSTILE_BIN:-$(cd ../.. && pwd)/target/release/turnstile}"
mvn -q -B test-compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt -Dmdep.includeScope=test
exec java -cp "target/classes:target/test-classes:$(cat target/classpath.txt)" dev.turnstile.client.Bench "$@"
