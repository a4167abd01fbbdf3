#!/usr/bin/env bash
# One entry for the fresh-machine rule: set everything up, then run the demo or the tests.
#   scripts/dev.sh demo   - a local Ember node running a demo workload of tasks and actors
#   scripts/dev.sh test   - every test (pytest)
#   scripts/dev.sh setup  - only the set-up
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

setup() {
  setup_frontend
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
  fi
  # Only reinstall when the project's requirements changed since the last set-up.
  stamp=.venv/.ember-installed
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[test]'
    touch "$stamp"
  fi
}

# The browser app (frontend/) and the browser its tests drive. Idempotent: npm ci only when the
# lock file changed, the build only when a source is newer than it, apt only when missing.
setup_frontend() {
  if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      echo "dev.sh: chromium is missing (the browser tests need Debian's chromium): apt-get install chromium" >&2
    fi
  fi
  command -v npm >/dev/null 2>&1 || { echo "dev.sh: npm is missing; the dashboard's browser app cannot be built" >&2; return 1; }
  if [ ! -f frontend/node_modules/.package-lock.json ] || [ frontend/package-lock.json -nt frontend/node_modules/.package-lock.json ]; then
    (cd frontend && npm ci --no-audit --no-fund --loglevel=error)
  fi
  if [ ! -f frontend/dist/index.html ] || [ -n "$(find frontend/src frontend/index.html frontend/package-lock.json frontend/vite.config.ts frontend/tsconfig.json -newer frontend/dist/index.html 2>/dev/null | head -1)" ]; then
    (cd frontend && npm run --silent build >/dev/null)
  fi
}

# The diagnostics tests' outside tools: a real Prometheus server (Debian's) that scrapes
# /metrics, and speedscope from npm with Debian's chromium to load timelines in a real
# viewer. Idempotent: apt only for what is missing, npm ci only when the lock file changed.
setup_diagnostics_tools() {
  missing=""
  command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
  if [ -n "$missing" ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      apt-get update -qq
      # shellcheck disable=SC2086 - the list is ours, word splitting wanted
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    else
      echo "dev.sh: missing$missing (the diagnostics tests need them): apt-get install$missing" >&2
    fi
  fi
  command -v npm >/dev/null 2>&1 || { echo "dev.sh: npm is missing; the timeline viewer test cannot run" >&2; return 0; }
  tools=tests/tools
  if [ ! -f "$tools/node_modules/.package-lock.json" ] || [ "$tools/package-lock.json" -nt "$tools/node_modules/.package-lock.json" ]; then
    (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

case "${1:-}" in
  setup) setup; setup_diagnostics_tools ;;
  demo) setup; shift; exec .venv/bin/ember demo "$@" ;;
  test) setup; setup_diagnostics_tools; shift; exec .venv/bin/python -m pytest "$@" ;;
  *) echo "usage: scripts/dev.sh setup|demo|test [args]" >&2; exit 2 ;;
esac
