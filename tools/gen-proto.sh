#!/usr/bin/env bash
# Regenerates the Go code for shoal's .proto files with the system protoc.
# The plugins are installed into bin/tools at pinned versions so that the
# generated files do not change with whatever happens to be on PATH:
# protoc-gen-go follows go.mod's google.golang.org/protobuf (the runtime the
# generated code must match), protoc-gen-go-grpc is pinned below.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

GRPC_PLUGIN_VERSION=v1.6.2
PB_VERSION=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
TOOLS_BIN=$PWD/bin/tools

command -v protoc >/dev/null || { echo "gen-proto: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }

# install_plugin NAME PACKAGE VERSION reinstalls NAME unless it already reports VERSION.
install_plugin() {
	local name=$1 pkg=$2 version=$3
	if [[ -x $TOOLS_BIN/$name ]] && "$TOOLS_BIN/$name" --version 2>/dev/null | grep -qw -- "v\{0,1\}${version#v}"; then
		return
	fi
	echo "gen-proto: installing $pkg@$version into $TOOLS_BIN" >&2
	GOBIN=$TOOLS_BIN go install "$pkg@$version"
}

install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PB_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$GRPC_PLUGIN_VERSION"

for dir in internal/compat/sacloud/autoscalerpb; do
	PATH=$TOOLS_BIN:$PATH protoc -I "$dir" \
		--go_out="$dir" --go_opt=paths=source_relative \
		--go-grpc_out="$dir" --go-grpc_opt=paths=source_relative \
		"$dir"/*.proto
done
