#!/usr/bin/env bash
# Install a headless Chromium for the HTML report test (tests/test_report_html.py).
# Idempotent; tolerant of machines without root (the test then skips and says why).
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "install-chromium: not root and no passwordless sudo; skipping (HTML browser test will skip)" >&2
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-chromium: no apt-get; install chromium by hand (HTML browser test will skip)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq chromium >/dev/null \
    || echo "install-chromium: apt-get install chromium failed (HTML browser test will skip)" >&2
exit 0
