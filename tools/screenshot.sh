#!/usr/bin/env bash
# Screenshot a page of the built book in headless Chromium with the network switched off
# (a fresh network namespace), to check that math, figures and buttons render offline.
# Usage: tools/screenshot.sh book/02_sinusoidal.html out.png [height]
# Needs Debian's chromium (apt-get install chromium) and root for `unshare -n`.
set -euo pipefail
page=${1:?page path under _build/html, e.g. book/intro.html}
out=${2:?output PNG}
height=${3:-1600}
root="$(cd "$(dirname "$0")/.." && pwd)"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
unshare -n chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --virtual-time-budget=10000 --window-size=1280,"$height" \
  --screenshot="$out" "file://$root/_build/html/$page" 2>/dev/null
echo "$out"
