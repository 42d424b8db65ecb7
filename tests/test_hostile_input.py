"""Hostile repo content and references are refused with their documented exit codes.

One test per finding of the adversarial run (issue 16): negative secondary dimensions, the
per-repo header budget, the config nesting budget, a tensor stored in two shards, inexact repo
ids and revisions, ``--out`` through a dangling symlink. Exit codes only; wording is free.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from club3090.errors import InputError
from club3090.model.architecture import parse_config
from club3090.model.budgets import MAX_JSON_DEPTH, header_bytes_budget, parse_json_capped
from club3090.model.repo_id import repo_id_problem, revision_problem, source_problem
from tests.fakehub import FakeHub, safetensors_file
from tests.test_cli_robustness import model_folder, real_config, run

RIG = ["--profile-like", "vllm/minimal", "--gpus", "1x3090"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


# --------------------------------------------------------------------------------------------
# negative secondary dimensions (the fuzzer's inputs): unpriceable, never a negative "fits"
# --------------------------------------------------------------------------------------------
NEGATIVE = [
    {"global_head_dim": -128},
    {"num_global_key_value_heads": -4},
    {"kv_lora_rank": 512, "qk_rope_head_dim": -64, "qk_nope_head_dim": 128},
    {"layer_types": ["linear_attention", "full_attention"] * 14, "linear_conv_kernel_dim": -4,
     "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
     "linear_value_head_dim": 128},
    {"model_type": "mamba2", "n_groups": -8, "num_heads": 64, "head_dim": 64, "state_size": 128},
    {"conv_kernel": -4, "model_type": "mamba2", "num_heads": 64, "head_dim": 64, "state_size": 128},
    {"num_key_value_heads": "-8"},
    {"text_config": {"global_head_dim": -1.0}},
]


@pytest.mark.parametrize("extra", NEGATIVE, ids=lambda e: next(iter(e)))
def test_negative_dimensions_are_unpriceable(extra):
    config = {**real_config(), **extra}
    arch = parse_config(config)
    assert arch.unpriceable_reason and "negative" in arch.unpriceable_reason


@pytest.mark.parametrize("extra", NEGATIVE[:3], ids=lambda e: next(iter(e)))
def test_kv_calc_refuses_negative_dimensions(extra, tmp_path, capsys):
    folder = model_folder(tmp_path, config={**real_config(), **extra})
    code, out, _ = run(["kv-calc", str(folder), "--gpus", "1x3090", "--json"], capsys)
    doc = json.loads(out)
    assert code == 2 and doc["ok"] is False
    assert not any(isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 for v in _numbers(doc))


def _numbers(doc: object) -> list[object]:
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in _numbers(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v)]
    return [doc]


def test_ordinary_configs_are_still_priceable():
    assert parse_config(real_config()).unpriceable_reason is None
    assert parse_config({**real_config(), "pad_token_id": -1, "sliding_window": -1}).unpriceable_reason is None


# --------------------------------------------------------------------------------------------
# budgets
# --------------------------------------------------------------------------------------------
def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_config_nesting_budget():
    assert parse_json_capped(_nested(MAX_JSON_DEPTH), name="c") is not None
    with pytest.raises(InputError):
        parse_json_capped(_nested(MAX_JSON_DEPTH + 1), name="c")


def test_header_budget_grows_with_shards_under_a_ceiling():
    assert header_bytes_budget(1) < header_bytes_budget(4) < header_bytes_budget(10_000)
    assert header_bytes_budget(10_000) == header_bytes_budget(100_000)
    assert header_bytes_budget(1) >= 1_000_000       # a 16 GB checkpoint's headers are ~0.3 MB


def _big_tensors(prefix: str, n: int) -> dict[str, tuple[str, list[int]]]:
    return {f"{prefix}.t{i:05d}.weight": ("BF16", [2]) for i in range(n)}


def test_header_bytes_across_shards_are_budgeted(fake_hub: FakeHub, monkeypatch, capsys):
    import club3090.edges.hub as hub

    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    index = {"weight_map": {}}
    files: dict[str, object] = {"config.json": json.dumps(real_config()).encode()}
    for k in range(4):
        name = f"model-{k + 1:05d}-of-00004.safetensors"
        table = _big_tensors(f"s{k}", 800)                       # ~60 KB of header each
        files[name] = safetensors_file(name, table)
        index["weight_map"].update(dict.fromkeys(table, name))
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    fake_hub.add_repo("acme/many-headers", files)  # type: ignore[arg-type]
    assert run(["inspect", "acme/many-headers", "--json"], capsys)[0] == 0   # within the real budget
    monkeypatch.setattr(hub, "header_bytes_budget", lambda shards: 150_000)  # two headers' worth
    assert run(["inspect", "acme/many-headers", "--json"], capsys)[0] == 65
    assert run(["kv-calc", "acme/many-headers", "--json"], capsys)[0] == 65


# --------------------------------------------------------------------------------------------
# a tensor stored in two shards: inspect and kv-calc agree (refuse)
# --------------------------------------------------------------------------------------------
def _write(path: Path, tensors: dict) -> None:
    f = safetensors_file(path.name, tensors)
    with path.open("wb") as handle:
        handle.write(f.prefix)
        handle.truncate(f.size)


def test_a_tensor_in_two_shards_is_refused_by_inspect_and_kv_calc(tmp_path, capsys):
    folder = tmp_path / "dup"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(real_config()), encoding="utf-8")
    _write(folder / "a.safetensors", {"shared.weight": ("BF16", [1024, 1024]), "a.weight": ("BF16", [4])})
    _write(folder / "b.safetensors", {"shared.weight": ("BF16", [1024, 1024]), "b.weight": ("BF16", [4])})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "shared.weight": "a.safetensors", "a.weight": "a.safetensors", "b.weight": "b.safetensors"}}))
    assert run(["inspect", str(folder), "--json"], capsys)[0] == 65
    assert run(["kv-calc", str(folder), "--gpus", "1x3090", "--json"], capsys)[0] == 65


# --------------------------------------------------------------------------------------------
# repo ids and revisions: exact, checked before any request
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["acme/small\n", "acme/small\r", "\tacme/small", "acme/small@main\n",
                                    "acme/small@..", "acme/small@.", "acme/small@../../x", "acme/small@a..b",
                                    "acme/small@" + "a" * 5000, "acme/small@main\x1b[2J", "acme/small@~1",
                                    "acme/sm\u2028all"])
def test_inexact_references_stop_before_any_request(source, fake_hub: FakeHub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/small")
    assert run(["inspect", source, "--json"], capsys)[0] == 2
    assert run(["kv-calc", source, "--json"], capsys)[0] == 2
    assert run(["pull", source, *RIG, "--dry-run", "--json"], capsys)[0] == 2
    assert fake_hub.requests() == []


@pytest.mark.parametrize("source", ["a" * 300 + "/b", "org/" + "b" * 300, "x" * 5000])
def test_overlong_sources_are_not_internal_errors(source, fake_hub: FakeHub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    for argv in (["inspect", source, "--json"], ["kv-calc", source, "--json"]):
        assert run(argv, capsys)[0] == 2
    assert fake_hub.requests() == []


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "refs/convert/parquet", "a" * 40,
                                      "release-2024.05", "feature/x_y"])
def test_real_revisions_are_valid(revision):
    assert revision_problem(revision) is None


@pytest.mark.parametrize("repo_id,ok", [("Qwen/Qwen3-0.6B", True), ("a/b", True), ("org/name\n", False),
                                        ("org/na..me", False), ("org/" + "a" * 97, False), ("org/a b", False)])
def test_repo_id_rule(repo_id, ok):
    assert (repo_id_problem(repo_id) is None) is ok


def test_source_rule_allows_ordinary_paths():
    assert source_problem("/data/models/My Model (copy)") is None
    assert source_problem("org/name\n") is not None


# --------------------------------------------------------------------------------------------
# --out through a dangling symlink
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["compose", "--profile", "vllm/minimal"],
                                     ["pull", "Lorbus/Qwen3.6-27B-int4-AutoRound", *RIG]])
def test_out_never_follows_a_dangling_symlink_without_force(command, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere" / "deep" / "file.yml"
    link = tmp_path / "link.yml"
    link.symlink_to(elsewhere)
    assert run([*command, "--out", str(link)], capsys)[0] == 64
    assert not (tmp_path / "elsewhere").exists() and link.is_symlink()
    assert run([*command, "--out", str(link), "--force"], capsys)[0] == 0
    assert "services:" in elsewhere.read_text(encoding="utf-8")

