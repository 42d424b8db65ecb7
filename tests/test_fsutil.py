"""fsutil's capped readers refuse what is not a regular file instead of reading it forever."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from club3090 import cli
from club3090.cli import exit_codes
from club3090.edges.files import read_bytes_capped, read_json_capped
from club3090.errors import InputError
from club3090.reports import capture


def test_a_device_is_refused_not_read(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        read_json_capped(Path("/dev/zero"))


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError):
        read_json_capped(fifo)


def test_at_most_limit_plus_one_bytes_are_read(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"1" * 10)
    assert read_bytes_capped(path, limit=10) == b"1" * 10
    with pytest.raises(InputError):
        read_bytes_capped(path, limit=9)


def test_a_fifo_last_marker_names_no_bundle(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / capture.LAST_FILE)
    assert capture.latest_bundle(tmp_path) is None


def test_submit_of_a_bundle_with_a_fifo_manifest_is_bad_input(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    os.mkfifo(bundle / capture.MANIFEST_FILE)
    assert cli.main(["pull", "--submit", str(bundle)]) == exit_codes.DATAERR


def test_submit_last_with_a_fifo_marker_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / capture.CAPTURES_DIRNAME).mkdir()
    os.mkfifo(tmp_path / capture.CAPTURES_DIRNAME / capture.LAST_FILE)
    assert cli.main(["pull", "--submit-last"]) == exit_codes.USAGE
