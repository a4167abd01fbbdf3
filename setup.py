"""The build's one custom step: the browser app travels inside the wheel and the sdist.

Everything else is declared in pyproject.toml. This file only adds two setuptools commands:

- ``sdist`` builds the app first (``npm ci && npm run build`` in ``frontend/``) when it is
  missing or older than its sources, so the sdist carries ``frontend/dist`` (MANIFEST.in) and
  installing from it needs no Node.
  A tarball that Python's zipfile would take for a zip is compressed again (pip asks
  zipfile before the name: ``not_read_as_zip``).
- ``build_py`` (the wheel) builds it the same way when Node is present and the copy is
  missing or stale, then copies ``frontend/dist`` to ``ember/frontend/dist`` in the wheel:
  the path the dashboard looks for beside ``ember/dashboard`` (dashboard/routes/frontend.py),
  which in a source tree is ``frontend/dist`` itself. An editable install builds and copies
  nothing: it serves the source tree's copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "frontend")
DIST = os.path.join(APP, "dist")
# What the built app is made from: a change to any of these makes the built copy stale.
SOURCES = ("src", "index.html", "package.json", "package-lock.json", "vite.config.ts")


def _newest_source() -> float:
    newest = 0.0
    for name in SOURCES:
        path = os.path.join(APP, name)
        for root, _dirs, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
            for f in files:
                full = os.path.join(root, f)
                if os.path.exists(full):
                    newest = max(newest, os.path.getmtime(full))
    return newest


def _built() -> bool:
    index = os.path.join(DIST, "index.html")
    return os.path.isfile(index) and os.path.getmtime(index) >= _newest_source()


def build_app(required: bool) -> bool:
    """Builds the app unless a current build is there; True when ``frontend/dist`` is usable.
    Without npm an existing (even stale) build is kept; with none, ``required`` fails."""
    if _built():
        return True
    npm = shutil.which("npm")
    if npm is None or os.environ.get("EMBER_SKIP_FRONTEND_BUILD"):
        if os.path.isfile(os.path.join(DIST, "index.html")):
            return True
        msg = (
            "ember: the browser app is not built and npm is not on PATH. Install Node.js 20+ "
            "and npm (Debian: apt-get install nodejs npm), or build it yourself with "
            "`cd frontend && npm ci && npm run build`, then build again."
        )
        if required:
            sys.exit(msg)
        print(msg + " Building without it: the dashboard will serve no pages.", file=sys.stderr)
        return False
    print("ember: building the browser app (npm ci && npm run build in frontend/)", file=sys.stderr)
    for argv in ([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], [npm, "run", "build"]):
        # argv is a list of our own words: no shell, nothing to escape.
        subprocess.run(argv, cwd=APP, check=True, stdout=sys.stderr)
    return True


class BuildPyWithApp(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the dashboard finds the source tree's frontend/dist
        if build_app(required=False):
            target = os.path.join(self.build_lib, "ember", "frontend", "dist")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(DIST, target)


def not_read_as_zip(tarball: str) -> None:
    """Compresses ``tarball`` (a .tar.gz) again, at another level, while Python's
    ``zipfile.is_zipfile`` takes it for a zip. pip and twine ask that function before they
    look at the name, and it accepts any file with a zip end record's four bytes in its last
    64 KiB: about one gzip stream in 65,000 has them by chance, and pip then fails to install
    it with ``BadZipFile``. The files inside do not change."""
    import gzip
    import zipfile

    for level in (8, 7, 6, 5, 4):
        if not zipfile.is_zipfile(tarball):
            return
        with gzip.open(tarball, "rb") as packed:
            tar = packed.read()
        name = os.path.basename(tarball).removesuffix(".gz")
        with open(tarball, "wb") as raw, gzip.GzipFile(name, "wb", level, raw, mtime=0) as out:
            out.write(tar)
    if zipfile.is_zipfile(tarball):
        sys.exit(f"ember: {tarball} reads as a zip at every compression level; build it again")


class SdistWithApp(sdist):
    def run(self) -> None:
        build_app(required=True)
        super().run()
        for archive in self.archive_files:
            if archive.endswith(".tar.gz"):
                not_read_as_zip(archive)


if __name__ == "__main__":  # as setuptools runs it; tests import not_read_as_zip alone
    setup(cmdclass={"build_py": BuildPyWithApp, "sdist": SdistWithApp})
