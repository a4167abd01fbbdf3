"""How ``ember.job_submission`` packs a local working_dir: files relative to it, excludes
(by path or by name, a directory's contents with it), the same bytes for the same files
whenever they are packed (the package's name is its content's hash), no links followed, and a
size limit whose error names the limit and what to do."""

from __future__ import annotations

import io
import os
import zipfile

import pytest
from ember.job_submission import JobDetails, JobStatus, zip_directory


def _tree(root) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "main.py").write_text("print('hi')\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 1000)
    (root / "notes.log").write_text("log\n")


def _names(data: bytes) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(data)).namelist())


def test_files_are_relative_and_excludes_apply(tmp_path):
    _tree(tmp_path)
    assert _names(zip_directory(str(tmp_path))) == [
        "data/big.bin",
        "main.py",
        "notes.log",
        "pkg/mod.py",
    ]
    assert _names(zip_directory(str(tmp_path), ["data", "*.log"])) == ["main.py", "pkg/mod.py"]
    content = zipfile.ZipFile(io.BytesIO(zip_directory(str(tmp_path)))).read("pkg/mod.py")
    assert content == b"X = 1\n"


def test_the_same_files_give_the_same_bytes(tmp_path):
    _tree(tmp_path)
    first = zip_directory(str(tmp_path))
    os.utime(tmp_path / "main.py", (1, 1))  # times do not change the package
    assert zip_directory(str(tmp_path)) == first
    (tmp_path / "main.py").write_text("print('changed')\n")
    assert zip_directory(str(tmp_path)) != first


def test_links_are_not_followed(tmp_path):
    _tree(tmp_path)
    outside = tmp_path.parent / "outside-secret.txt"
    outside.write_text("secret")
    (tmp_path / "link.txt").symlink_to(outside)
    assert "link.txt" not in _names(zip_directory(str(tmp_path)))


def test_size_limit_names_the_limit_and_the_fix(tmp_path, monkeypatch):
    _tree(tmp_path)
    from ember import runtime_env_packages

    monkeypatch.setattr(runtime_env_packages, "MAX_PACKAGE_BYTES", 500)
    with pytest.raises(ValueError, match=r"over 0 MiB.*excludes"):
        zip_directory(str(tmp_path))
    with pytest.raises(ValueError, match="is not a directory"):
        zip_directory(str(tmp_path / "main.py"))


def test_job_details_and_status():
    d = JobDetails({"submission_id": "raysubmit_x", "status": "SUCCEEDED", "message": "ok"})
    assert d.status is JobStatus.SUCCEEDED and d.status.is_terminal()
    assert dict(d)["submission_id"] == "raysubmit_x" and d.message == "ok"
    assert not JobStatus.RUNNING.is_terminal() and str(JobStatus.PENDING) == "PENDING"
    with pytest.raises(AttributeError):
        d.nothing  # noqa: B018


def test_a_node_copies_a_package_from_the_head_in_chunks_and_unpacks_it_once(tmp_path):
    from ember import runtime_env_packages as packages

    head, node = tmp_path / "head", tmp_path / "node"
    src = tmp_path / "src"
    src.mkdir()
    (src / "helper.py").write_text("X = 2\n")
    (src / "blob.bin").write_bytes(os.urandom(9 * 1024 * 1024))  # three 4 MiB chunks
    name = "_ray_pkg_abc.zip"
    stored = packages.package_file(str(head), "gcs", name)
    os.makedirs(os.path.dirname(stored))
    with open(stored, "wb") as f:
        f.write(zip_directory(str(src)))
    calls = []

    def fetch(n: str, offset: int) -> dict:
        calls.append(offset)
        return packages.read_chunk(str(head), n, offset)

    # The path the driver's node has, in another session: this node's own copy is used.
    theirs = f"{head}/runtime_resources/working_dir_files/_ray_pkg_abc"
    assert packages.package_of(theirs) == ("working_dir_files", name)
    here = packages.localize(theirs, str(node), fetch)
    assert here == f"{node}/runtime_resources/working_dir_files/_ray_pkg_abc"
    assert (tmp_path / "node/runtime_resources/working_dir_files/_ray_pkg_abc/helper.py").exists()
    assert calls == [0, 4 << 20, 8 << 20]
    assert packages.localize(theirs, str(node), fetch) == here and len(calls) == 3  # once
    # Paths that are not another session's package are left alone.
    assert packages.localize("/usr/lib/python3", str(node), fetch) == "/usr/lib/python3"
    assert packages.localize(here, str(node), fetch) == here


def test_package_reads_refuse_links_and_bad_names(tmp_path):
    from ember import runtime_env_packages as packages

    stored = packages.package_file(str(tmp_path), "gcs", "_ray_pkg_link.zip")
    os.makedirs(os.path.dirname(stored))
    secret = tmp_path / "cluster_token"
    secret.write_text("s3cret")
    os.symlink(secret, stored)
    with pytest.raises(OSError):
        packages.read_chunk(str(tmp_path), "_ray_pkg_link.zip", 0)
    with pytest.raises(packages.PackageError, match="bad package name"):
        packages.read_chunk(str(tmp_path), "../cluster_token", 0)
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../escape.py", "x")
    with pytest.raises(ValueError, match="unsafe path"):
        packages.unpack(str(tmp_path), "_ray_pkg_evil.zip", evil.getvalue(), "py_modules_files")
    assert not (tmp_path / "runtime_resources" / "escape.py").exists()
