#!/usr/bin/env bash
# One entry for the fresh-machine rule: set everything up, then run the demo or the tests.
#   scripts/dev.sh demo   - a local Ember node running a demo workload of tasks and actors
#   scripts/dev.sh test   - every test (pytest)
#   scripts/dev.sh setup  - only the set-up
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

system_packages() {
  # iproute2: the multi-node test puts nodes in network namespaces (`ip netns`).
  if ! command -v ip >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null
  fi
}

setup() {
  system_packages
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

case "${1:-}" in
  setup) setup ;;
  demo) setup; shift; exec .venv/bin/ember demo "$@" ;;
  test) setup; shift; exec .venv/bin/python -m pytest "$@" ;;
  *) echo "usage: scripts/dev.sh setup|demo|test [args]" >&2; exit 2 ;;
esac
