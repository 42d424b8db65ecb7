"""Header reads from the Hub: one round trip per shard, within the budget and the deadlines.

Request counts come from the fake Hub's log (never from timings: the machine is noisy)."""

from __future__ import annotations

import contextlib
import io
import json
import struct
from dataclasses import replace
from typing import Any

import pytest

from club3090 import cli
from club3090.edges import hub as H
from club3090.edges.resolve import resolve
from club3090.errors import HubUnreachable, InputError
from club3090.model.budgets import header_bytes_budget
from club3090.model.safetensors import estimate_header_bytes
from club3090.model.spec import ModelSpec, RepoFile
from tests.fakehub import FakeFile, FakeHub, add_deepseek_v3_layout, header_sum, safetensors_file


def _inspect(monkeypatch: pytest.MonkeyPatch, hub: FakeHub, repo_id: str) -> dict[str, Any]:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["inspect", repo_id, "--json"])
    assert code == 0, out.getvalue()
    facts: dict[str, Any] = json.loads(out.getvalue())
    return facts


@pytest.mark.parametrize("lfs_redirect", [False, True])
def test_the_163_shard_layout_costs_one_request_per_shard(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch,
                                                          lfs_redirect: bool) -> None:
    repo = add_deepseek_v3_layout(fake_hub)
    fake_hub.quirks.lfs_redirect = lfs_redirect
    shards = sorted(n for n in repo.files if n.endswith(".safetensors"))
    assert len(shards) == 163
    facts = _inspect(monkeypatch, fake_hub, "deepseek-ai/DeepSeek-V3")
    weights = sum(f.size - len(f.prefix) for n, f in repo.files.items() if n.endswith(".safetensors"))
    assert facts["weights_bytes"] == weights
    reads = (fake_hub.requests("GET", "/cdn/") if lfs_redirect
             else [r for r in fake_hub.requests("GET") if r.path.endswith(".safetensors")])
    asked = [r.path.rpartition("/")[2] for r in fake_hub.requests("GET", "/resolve/") if r.path.endswith(".safetensors")]
    assert sorted(asked) == shards
    assert len(reads) == 163  # one ranged read per shard: the speculative range held every header
    # model info + config.json + the index + the reads (+ one redirect per read on the real Hub's layout)
    assert len(fake_hub.log) == (3 + 2 * 163 if lfs_redirect else 3 + 163)
    if not lfs_redirect:
        assert len(fake_hub.log) <= 170
    # the speculative ranges are sized from the index, not from the largest header anywhere
    sent = sum(r.sent for r in reads)
    assert sent < 2 * sum(len(repo.files[n].prefix) for n in shards)


def test_qwen3_8b_in_four_requests(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    facts = _inspect(monkeypatch, fake_hub, "Qwen/Qwen3-8B")
    assert facts["weights_bytes"] > 0
    # model info, config.json, the header read (its LFS redirect and the CDN answer)
    assert [(r.method, r.status) for r in fake_hub.log] == [("GET", 200), ("GET", 200), ("GET", 302), ("GET", 206)]
    assert not fake_hub.requests("HEAD")


def test_an_index_that_underestimates_takes_a_second_range_for_the_tail(fake_hub: FakeHub) -> None:
    table = {f"w.{i}": ("BF16", [8, 8]) for i in range(50)}
    small = safetensors_file("model-00001-of-00002.safetensors", table,
                             metadata={"format": "pt", "notes": "x" * 40_000})   # metadata the index cannot see
    other = safetensors_file("model-00002-of-00002.safetensors", {"v": ("BF16", [4])})
    index = {"weight_map": {**{n: small.name for n in table}, "v": other.name}}
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/meta", with_index=False, metadata_files=False,
                         drop_files=("model.safetensors",),
                         extra_files={small.name: small, other.name: other,
                                      "model.safetensors.index.json": json.dumps(index).encode()})
    spec = resolve("acme/meta", fake_hub.settings(), hub=H.HubClient(fake_hub.settings()))
    assert isinstance(spec, ModelSpec) and spec.weights_bytes == header_sum(table) + header_sum({"v": ("BF16", [4])})
    first = H.first_read_sizes([RepoFile(small.name, small.size)], index, header_bytes_budget(2))[small.name]
    n = struct.unpack("<Q", small.prefix[:8])[0]
    assert first < 8 + n
    ranges = [r.headers["range"] for r in fake_hub.requests("GET", "/cdn/")
              if r.path.endswith(small.sha256)]
    assert ranges == [f"bytes=0-{first - 1}", f"bytes={first}-{n + 7}"]


def test_speculative_ranges_stay_within_the_budget_and_the_cap() -> None:
    files = [RepoFile(f"s{i}.safetensors", 10**9) for i in range(4)]
    weight_map = {f"t{i}.{j}": f"s{i}.safetensors" for i in range(4) for j in range(20_000)}
    sizes = H.first_read_sizes(files, {"weight_map": weight_map}, budget=2_000_000)
    assert all(v == 500_000 for v in sizes.values())                       # a fair share of the budget
    sizes = H.first_read_sizes(files, {"weight_map": weight_map}, budget=1 << 40)
    assert all(v == H.MAX_FIRST_READ_BYTES for v in sizes.values())         # never more than the cap
    sizes = H.first_read_sizes(files, None, budget=1 << 40)
    assert all(v == H.FIRST_READ_BYTES for v in sizes.values())             # no index: the default
    tiny = H.first_read_sizes(files, {"weight_map": {"a": "s0.safetensors", "b": 7}}, budget=1 << 40)
    assert tiny["s0.safetensors"] == 8 + estimate_header_bytes({"a": "s0.safetensors"})["s0.safetensors"] \
        + H.HINT_SLACK_BYTES


def test_a_hostile_huge_header_still_hits_the_budget(fake_hub: FakeHub) -> None:
    huge = 30 * 1024 * 1024
    shards = {f"model-0000{i}-of-00003.safetensors": FakeFile(name="", prefix=struct.pack("<Q", huge) + b"{",
                                                               size=huge + 64, lfs=True) for i in (1, 2, 3)}
    index = {"weight_map": {f"w{i}": name for i, name in enumerate(shards)}}
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/huge", with_index=False, metadata_files=False,
                         drop_files=("model.safetensors",),
                         extra_files={**shards, "model.safetensors.index.json": json.dumps(index).encode()})
    assert 3 * huge > header_bytes_budget(3)
    with pytest.raises(InputError, match="budget"):
        resolve("acme/huge", fake_hub.settings(), hub=H.HubClient(fake_hub.settings()))
    assert fake_hub.bytes_sent("/cdn/") < header_bytes_budget(3)


def test_a_slow_shard_still_misses_the_deadline(fake_hub: FakeHub) -> None:
    add_deepseek_v3_layout(fake_hub, repo_id="acme/ds", shards=8)
    fake_hub.fault("slow", "/cdn/", times=None, delay=3.0)
    settings = replace(fake_hub.settings(), hub_deadline_s=0.5, hub_command_deadline_s=1.0)
    with pytest.raises(HubUnreachable, match="deadline"):
        resolve("acme/ds", settings, hub=H.HubClient(settings, retries=0))
