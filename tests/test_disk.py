"""The [C2a] disk edge: statvfs of the nearest existing ancestor, fail-closed, x1.2 headroom."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from club3090.edges.disk import free_bytes_at
from club3090.gate.disk import required_bytes


def fake_statvfs(bavail=1000, frsize=4096, bsize=8192):
    seen: list[str] = []

    def statvfs(path):
        seen.append(path)
        return SimpleNamespace(f_bavail=bavail, f_frsize=frsize, f_bsize=bsize)

    return statvfs, seen


def test_existing_path_is_measured_itself(tmp_path):
    statvfs, seen = fake_statvfs()
    assert free_bytes_at(tmp_path, statvfs=statvfs) == 1000 * 4096
    assert seen == [str(tmp_path)]


def test_missing_path_uses_nearest_existing_ancestor(tmp_path):
    statvfs, seen = fake_statvfs(bavail=7, frsize=512)
    target = tmp_path / "not" / "yet" / "huggingface"
    assert free_bytes_at(target, statvfs=statvfs) == 7 * 512
    assert seen == [str(tmp_path)]


def test_relative_path_is_resolved_against_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    statvfs, seen = fake_statvfs()
    free_bytes_at("missing/dir", statvfs=statvfs)
    assert seen == [str(tmp_path)]


def test_a_file_in_the_way_is_measured_where_it_stands(tmp_path):
    (tmp_path / "file").write_text("x")
    statvfs, seen = fake_statvfs()
    free_bytes_at(tmp_path / "file" / "below", statvfs=statvfs)
    assert seen == [str(tmp_path / "file")]  # an existing file sits on the same file system


def test_zero_frsize_falls_back_to_bsize(tmp_path):
    statvfs, _ = fake_statvfs(bavail=3, frsize=0, bsize=8192)
    assert free_bytes_at(tmp_path, statvfs=statvfs) == 3 * 8192


@pytest.mark.parametrize("error", [OSError(5, "Input/output error"), PermissionError(13, "denied")])
def test_statvfs_failure_is_none(tmp_path, error):
    def statvfs(path):
        raise error

    assert free_bytes_at(tmp_path, statvfs=statvfs) is None


def test_garbage_statvfs_answer_is_none(tmp_path):
    assert free_bytes_at(tmp_path, statvfs=lambda p: object()) is None


def test_real_statvfs_on_this_machine(tmp_path):
    free = free_bytes_at(tmp_path / "a" / "b")
    assert isinstance(free, int) and free >= 0
    st = os.statvfs(tmp_path)
    assert abs(free - st.f_bavail * st.f_frsize) < 1 << 30  # other processes may write meanwhile


@pytest.mark.parametrize("footprint, required", [
    (0, 0),
    (1, 2),                       # ceil(1.2)
    (5, 6),
    (10, 12),
    (16_000_000_000, 19_200_000_000),
    (10**15 + 1, 1_200_000_000_000_002),   # exact at petabyte scale (no float rounding)
])
def test_required_bytes_is_ceil_of_1_2x(footprint, required):
    assert required_bytes(footprint) == required


def test_required_bytes_rejects_negative():
    with pytest.raises(ValueError):
        required_bytes(-1)
