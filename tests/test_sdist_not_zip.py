"""The sdist is never taken for a zip. Older pips (23.2, the one ``python -m venv`` puts in a
new venv of Python 3.11) unpack any file that ``zipfile.is_zipfile`` accepts as a zip,
whatever its name, and that check accepts a gzip stream with a zip end record's four bytes in
its last 64 KiB: by chance about one build in 65,000, and it happened in a fresh-clone run
here (BadZipFile). setup.py's sdist compresses such a tarball again."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMBER = "ember-0.1.0/notes.txt"
CONTENT = b"text that compresses well\n" * 400 + b"PK\x05\x06" + bytes(18) + b"more text\n" * 50


def _not_read_as_zip(tarball: Path) -> None:
    """setup.py's own function, in a process of its own (setuptools and the distutils that
    pip imported here do not mix); not run as __main__, setup.py runs no setup()."""
    code = "import runpy, sys; runpy.run_path(sys.argv[1])['not_read_as_zip'](sys.argv[2])"
    argv = [sys.executable, "-c", code, str(ROOT / "setup.py"), str(tarball)]
    subprocess.run(argv, check=True, timeout=60, capture_output=True)


def _tarball_read_as_zip(path: Path) -> None:
    """A real .tar.gz whose bytes end with a zip end record: level 0 stores the member
    verbatim, signature included."""
    with tarfile.open(path, "w:gz", compresslevel=0) as tar:
        info = tarfile.TarInfo(MEMBER)
        info.size = len(CONTENT)
        tar.addfile(info, io.BytesIO(CONTENT))


def test_a_tarball_pip_would_take_for_a_zip_is_compressed_again(tmp_path: Path) -> None:
    tarball = tmp_path / "ember-0.1.0.tar.gz"
    _tarball_read_as_zip(tarball)
    assert zipfile.is_zipfile(tarball)

    _not_read_as_zip(tarball)

    assert not zipfile.is_zipfile(tarball)
    with tarfile.open(tarball, "r:gz") as tar:
        assert tar.getnames() == [MEMBER]
        assert tar.extractfile(MEMBER).read() == CONTENT


def test_a_tarball_not_read_as_zip_is_left_as_it_is(tmp_path: Path) -> None:
    tarball = tmp_path / "ember-0.1.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo(MEMBER)
        info.size = 5
        tar.addfile(info, io.BytesIO(b"plain"))
    before = tarball.read_bytes()
    _not_read_as_zip(tarball)
    assert tarball.read_bytes() == before
