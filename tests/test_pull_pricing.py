"""One owner for profile -> ServeShape: `pull` and `kv-calc --profile` price a curated profile alike.

Path A (a curated repo with ``--out``) prices the profile as shipped, drafter included, exactly as
``kv-calc --profile`` does; Path B (no ``--out``) prices the same shape without the drafter, so a
drafterless profile agrees on both paths.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from club3090 import cli
from tests.providers import plenty_of_disk

NUMBERS = ("kv_cache_tokens", "num_blocks", "kv_bytes_per_token", "block_size", "max_model_len",
           "max_model_len_fit", "raw_verdict", "max_concurrency", "per_gpu", "ranks")



def main(argv, **kw):
    """``cli.main`` with the live provider and plenty of free disk."""
    return cli.main(argv, provider=kw.pop("provider", plenty_of_disk), **kw)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    code = main(argv)
    data = json.loads(capsys.readouterr().out)
    assert code == data.get("exit_code", 0), data
    return data


@pytest.mark.parametrize("slug,profile,gpus,path_a", [
    ("Lorbus/Qwen3.6-27B-int4-AutoRound", "vllm/minimal", "1x3090", False),     # no drafter: Path B
    ("Lorbus/Qwen3.6-27B-int4-AutoRound", "vllm/minimal", "1xH100-80GB", True),
    ("Lorbus/Qwen3.6-27B-int4-AutoRound", "vllm/dual", "2x3090", True),         # MTP drafter: Path A
    ("cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit", "vllm/gemma-26ba4b-single", "1x3090", True),
])
def test_pull_fit_equals_kv_calc(capsys, tmp_path, slug, profile, gpus, path_a):
    argv = ["pull", slug, "--profile-like", profile, "--gpus", gpus, "--json", "--yes"]
    if path_a:
        argv += ["--out", str(tmp_path / "c.yml")]
    pulled = _json(capsys, argv)
    assert pulled["stratum"] == 0 and pulled["fit"] is not None, pulled["reason"]
    assert pulled["path"] == ("A" if path_a else "B")
    priced = _json(capsys, ["kv-calc", "--profile", profile, "--gpus", gpus, "--json"])
    for key in NUMBERS:
        assert pulled["fit"][key] == priced[key], key
