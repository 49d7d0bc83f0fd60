#!/usr/bin/env bash
# Install headless Chromium + chromedriver (Debian packages) and the `[web]` Python extra.
# Idempotent: re-running skips what is already there. Never runs `playwright install`:
# web envs drive the distro's /usr/bin/chromium through /usr/bin/chromedriver.
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  echo "chromium and chromedriver already installed: $(/usr/bin/chromedriver --version)"
else
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
    chromium chromium-driver
fi

if ! python -c "import selenium, miniwob" 2>/dev/null; then
  python -m pip install "selenium>=4.10" "miniwob>=1.0"
fi
echo "web envs ready: try 'agentrl envs check web/click-test-v0'"
