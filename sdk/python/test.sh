#!/usr/bin/env bash
# The Python library's checks, as CI runs them: install it from this checkout into a
# venv (stubs generated from proto/ by the build), type-check it (mypy --strict), and
# run its tests against a real server (TURNSTILE_BIN, else target/debug/turnstile) and
# a real redis-server. The venv is kept between runs (SDK_PY_VENV).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${SDK_PY_VENV:-${HOME}/.cache/turnstile-sdk-python}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade "$here[test]"
cd "$here"
echo "sdk/python: mypy"
"$venv/bin/mypy"
echo "sdk/python: pytest"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
