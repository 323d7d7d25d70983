#!/usr/bin/env bash
# The Java library's checks, as CI runs them: build it with Maven (the stubs generated
# from proto/ by protoc and protoc-gen-grpc-java from Maven Central, javac with every
# lint on), then its JUnit tests against a real server (TURNSTILE_BIN, else
# target/debug/turnstile) and a real redis-server, and install it into the local
# repository (~/.m2, which keeps the downloads between runs).
set -euo pipefail
cd "$(dirname "$0")"
for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "sdk/java: $tool is not installed" >&2
    exit 1
  fi
done
echo "sdk/java: mvn install (the twelve scenarios)"
mvn -B -q install "$@"
