#!/usr/bin/env bash
# The TypeScript library's checks, as CI runs them: install its dependencies (npm's
# cache keeps them between runs), build it (tsc with strict types; the protos copied
# in), and run its tests with node's test runner against a real server (TURNSTILE_BIN,
# else target/debug/turnstile) and a real redis-server.
set -euo pipefail
cd "$(dirname "$0")"
echo "sdk/typescript: npm install"
npm install --silent --no-audit --no-fund
echo "sdk/typescript: build and test"
npm test --silent
