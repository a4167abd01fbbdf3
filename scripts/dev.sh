#!/usr/bin/env bash
# One entry for the fresh-machine rule: set everything up, then run the demo or the tests.
#   scripts/dev.sh demo   - a local Ember node running a demo workload of tasks and actors
#   scripts/dev.sh test   - every test (pytest, three processes: EMBER_TEST_WORKERS to change)
#   scripts/dev.sh setup  - only the set-up
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

# What the tests drive from Debian: iproute2 (nodes in network namespaces), prometheus (a real
# server scraping /metrics), chromium (the browser tests and the timeline viewer),
# redis-server (the GCS's Redis storage, against a real server), openssh-server and rsync
# (the autoscaler's SSH hosts: sshd in namespaces), slurm-wlm and munge (its Slurm provider,
# against a real slurmctld/slurmd). One apt-get run, only for what is missing; the demo
# needs none of them.
system_packages() {
  missing=""
  command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
  command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
  command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
  [ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
  command -v rsync >/dev/null 2>&1 || missing="$missing rsync"
  command -v slurmctld >/dev/null 2>&1 || missing="$missing slurm-wlm"
  command -v munged >/dev/null 2>&1 || missing="$missing munge"
  [ -z "$missing" ] && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    # shellcheck disable=SC2086 - the list is ours, word splitting wanted
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "dev.sh: missing$missing (the tests need them): apt-get install$missing" >&2
  fi
}

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

# The browser app (frontend/), which the dashboard serves. Idempotent: npm install only when the
# lock file changed, the build only when a source is newer than it.
setup_frontend() {
  command -v npm >/dev/null 2>&1 || { echo "dev.sh: npm is missing; the dashboard's browser app cannot be built" >&2; return 1; }
  if [ ! -f frontend/node_modules/.package-lock.json ] || [ frontend/package-lock.json -nt frontend/node_modules/.package-lock.json ]; then
    (cd frontend && npm install --no-audit --no-fund --loglevel=error)
  fi
  if [ ! -f frontend/dist/index.html ] || [ -n "$(find frontend/src frontend/index.html frontend/package-lock.json frontend/vite.config.ts frontend/tsconfig.json -newer frontend/dist/index.html 2>/dev/null | head -1)" ]; then
    (cd frontend && npm run --silent build >/dev/null)
  fi
}

# The tests' outside tools: the Debian packages above, and speedscope from npm to load
# timelines in a real viewer (npm install only when the lock file changed;
# not npm ci, which rejects the lock files npm writes with this registry mirror).
setup_test_tools() {
  system_packages
  # Ray's own clients (ray list / get / summary, ray.util.state) judge the dashboard's Ray
  # state API: Ray 2.60 in its own environment, never a dependency of Ember (numpy: the
  # scale suite runs its large-object rows on it; tensorboard: TensorBoard's own reader judges
  # the Tune event files; optuna, hyperopt: Ray Tune's searchers, compared with Ember's).
  "$PY" scripts/ray_venv.py tests/tools/.ray-venv 'ray[default,tune,serve]==2.60.0' 'joblib>=1.3' numpy \
    tensorboard 'optuna>=3' 'hyperopt>=0.2.7' >/dev/null \
    || echo "dev.sh: could not make tests/tools/.ray-venv; the Ray client tests will skip" >&2
  command -v npm >/dev/null 2>&1 || { echo "dev.sh: npm is missing; the timeline viewer test cannot run" >&2; return 0; }
  tools=tests/tools
  if [ ! -f "$tools/node_modules/.package-lock.json" ] || [ "$tools/package-lock.json" -nt "$tools/node_modules/.package-lock.json" ]; then
    (cd "$tools" && npm install --no-audit --no-fund --loglevel=error)
  fi
}

case "${1:-}" in
  setup) setup; setup_test_tools ;;
  demo) setup; shift; exec .venv/bin/ember demo "$@" ;;
  # Three test processes, each taking whole files (a module's shared node stays in one), in
  # collection order (tests/conftest.py puts the longest first):
  # the tests wait on processes more than they compute (two kept two cores ~55% busy), and a
  # third cut the run from ~25 to ~20 minutes here. EMBER_TEST_WORKERS=0 runs them one at a
  # time in this process.
  test) setup; setup_test_tools; shift
        exec .venv/bin/python -m pytest -n "${EMBER_TEST_WORKERS:-3}" --dist loadfile \
          --no-loadscope-reorder "$@" ;;
  *) echo "usage: scripts/dev.sh setup|demo|test [args]" >&2; exit 2 ;;
esac
