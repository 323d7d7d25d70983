#!/usr/bin/env bash
# The Go library's checks, as CI runs them: the committed stubs under pb/ are what
# `go generate` makes from proto/ now (buf and the plugins go.mod pins), `go vet` is
# clean, and its tests pass against a real server (TURNSTILE_BIN, else
# target/debug/turnstile) and a real redis-server. Go's module cache keeps the
# downloads between runs.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v go >/dev/null 2>&1; then
  echo "sdk/go: go is not installed" >&2
  exit 1
fi
buf="${BUF:-${HOME}/.cache/turnstile-buf/node_modules/.bin/buf}"
if [ ! -x "$buf" ]; then
  echo "sdk/go: installing buf (npm @bufbuild/buf)"
  mkdir -p "${HOME}/.cache/turnstile-buf"
  npm install --silent --prefix "${HOME}/.cache/turnstile-buf" @bufbuild/buf@1 >/dev/null
  buf="${HOME}/.cache/turnstile-buf/node_modules/.bin/buf"
fi
echo "sdk/go: the stubs are current (go generate)"
before="$(mktemp -d)"
trap 'rm -rf "$before"' EXIT
cp -r pb "$before/"
BUF="$buf" go generate ./...
if ! diff -r "$before/pb" pb >/dev/null; then
  diff -r "$before/pb" pb | head -20 >&2 || true
  echo "sdk/go: pb/ is not what go generate makes from proto/: run it and commit pb/" >&2
  exit 1
fi
echo "sdk/go: go vet"
go vet ./...
echo "sdk/go: go test (the twelve scenarios)"
go test -count=1 ./... "$@"
