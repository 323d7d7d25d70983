#!/bin/sh
# Generates pb/ from ../../proto with buf (BUF names it, else buf on the PATH) and the
# protoc-gen-go and protoc-gen-go-grpc that go.mod's tool lines pin.
set -eu
cd "$(dirname "$0")"
rm -rf pb
"${BUF:-buf}" generate ../../proto --template buf.gen.yaml
