"""`club3090 fits <GGUF repo>`: every quant file priced with llama.cpp's memory model, ranked.

The repos are served by the loopback Hub: real GGUF headers written by the ``gguf`` package (big
quants as virtual files: their header, then zeros) and a tiny complete model. Expectations come
from the memory model's own inputs: each answer is checked against ``fit.llamacpp.predict`` one
step further (one more 256-cell block, one more GPU layer), not against stored numbers.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from club3090.cli import main
from club3090.edges import gguf_remote
from club3090.fit.llamacpp import CELL_PAD, LlamaCppArgs, predict
from club3090.model.gguf import parse_header
from club3090.model.gguf_model import from_files
from tests.fakehub import FakeFile
from tests.gguf_fixtures import Q, Spec, header_only, write

REPO = "acme/Dense-30B-GGUF"
MOE_REPO = "acme/Moe-30B-A3B-GGUF"
SWA_REPO = "acme/Gemma-27B-GGUF"
TINY_REPO = "acme/Tiny-GGUF"

# a 30B dense geometry: big enough that F16 and Q8_0 need offload on one 24 GiB card
DENSE = {"n_layer": 64, "n_embd": 6144, "n_ff": 16384, "n_head": 48, "n_head_kv": 8, "vocab": 32000}


def _tensors(*, n_layer: int, n_embd: int, n_ff: int, n_head: int, n_head_kv: int, vocab: int, qtype: Q,
             head_dim: int | None = None, n_expert: int = 0, n_ff_exp: int = 0,
             ) -> list[tuple[str, tuple[int, ...], Q]]:
    hd = head_dim or n_embd // n_head
    out: list[tuple[str, tuple[int, ...], Q]] = [
        ("token_embd.weight", (n_embd, vocab), qtype if qtype != Q.Q2_K else Q.Q4_K),
        ("output_norm.weight", (n_embd,), Q.F32), ("output.weight", (n_embd, vocab), Q.Q6_K if qtype != Q.F16 else Q.F16)]
    for i in range(n_layer):
        b = f"blk.{i}"
        out += [(f"{b}.attn_norm.weight", (n_embd,), Q.F32), (f"{b}.ffn_norm.weight", (n_embd,), Q.F32),
                (f"{b}.attn_q.weight", (n_embd, hd * n_head), qtype),
                (f"{b}.attn_k.weight", (n_embd, hd * n_head_kv), qtype),
                (f"{b}.attn_v.weight", (n_embd, hd * n_head_kv), qtype),
                (f"{b}.attn_output.weight", (hd * n_head, n_embd), qtype)]
        if n_expert:
            out += [(f"{b}.ffn_gate_inp.weight", (n_embd, n_expert), Q.F32),
                    (f"{b}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), qtype),
                    (f"{b}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), qtype),
                    (f"{b}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), qtype)]
        else:
            out += [(f"{b}.ffn_gate.weight", (n_embd, n_ff), qtype), (f"{b}.ffn_up.weight", (n_embd, n_ff), qtype),
                    (f"{b}.ffn_down.weight", (n_ff, n_embd), qtype)]
    return out


def _meta(arch: str, *, n_layer: int, n_embd: int, n_ff: int, n_head: int, n_head_kv: int, vocab: int,
          ctx: int, ftype: int, **extra: int) -> dict[str, int]:
    return {f"{arch}.block_count": n_layer, f"{arch}.embedding_length": n_embd, f"{arch}.feed_forward_length": n_ff,
            f"{arch}.attention.head_count": n_head, f"{arch}.attention.head_count_kv": n_head_kv,
            f"{arch}.vocab_size": vocab, f"{arch}.context_length": ctx, "general.file_type": ftype, **extra}


def _virtual(tmp: Path, arch: str, meta: dict[str, int], tensors: list) -> FakeFile:  # type: ignore[type-arg]
    header, size = header_only(arch, meta, tensors, tmp / "h.gguf")
    return FakeFile(name="", prefix=header, size=size, lfs=True)


def _tensor_bytes(tensors: list) -> int:  # type: ignore[type-arg]
    from gguf.constants import GGML_QUANT_SIZES

    total = 0
    for _, ne, qtype in tensors:
        block, size = GGML_QUANT_SIZES[qtype]
        n = ne[0] // block * size
        for d in ne[1:]:
            n *= d
        total += n
    return total


@pytest.fixture
def dense_hub(fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Q2_K, Q4_K_M, Q8_0 as single files, F16 split in two shards, and a projector to leave out."""
    files: dict[str, FakeFile] = {}
    for label, qtype, ftype in (("Q2_K", Q.Q2_K, 10), ("Q4_K_M", Q.Q4_K, 15), ("Q8_0", Q.Q8_0, 7)):
        files[f"Dense-30B-{label}.gguf"] = _virtual(tmp_path, "llama", _meta("llama", **DENSE, ctx=32768, ftype=ftype),
                                                    _tensors(**DENSE, qtype=qtype))
    f16 = _tensors(**DENSE, qtype=Q.F16)
    half = len(f16) // 2
    for no, part in enumerate((f16[:half], f16[half:])):
        meta = {**_meta("llama", **DENSE, ctx=32768, ftype=1), "split.no": no, "split.count": 2,
                "split.tensors.count": len(f16)}
        files[f"F16/Dense-30B-F16-0000{no + 1}-of-00002.gguf"] = _virtual(tmp_path, "llama", meta, part)
    files["mmproj-Dense-30B-F16.gguf"] = _virtual(tmp_path, "clip", {"clip.block_count": 1}, [])
    files["README.md"] = b"# a GGUF repo\n"
    fake_hub.add_repo(REPO, files)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    return fake_hub, {"F16": _tensor_bytes(f16)}


def _fits(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["fits", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _model(hub, repo: str, files: list[str]):  # type: ignore[no-untyped-def]
    """The model behind ``files`` read straight from the fake Hub's bytes (not through the product)."""
    shards = []
    for name in files:
        f = hub.repos[repo].files[name]
        shards.append(parse_header(f.prefix, file=name, file_size=f.size))
    return from_files(shards)


def _gpu_bytes() -> list[int]:
    from club3090.catalog import load_catalog
    from club3090.rig.gpus import parse_gpus

    gpus = parse_gpus("1x3090", load_catalog())
    assert gpus is not None
    return list(gpus.memory_bytes)


def _check_context(model, args: LlamaCppArgs, ctx: int, gpu: list[int]) -> None:  # type: ignore[no-untyped-def]
    """``ctx`` fits and one more block of cells does not (unless ``ctx`` is the model's maximum)."""
    at = predict(model, replace(args, ctx_size=ctx), gpu)
    assert not isinstance(at, str) and at.fits  # type: ignore[union-attr]
    if ctx + CELL_PAD <= (model.ctx_train or 0):
        over = predict(model, replace(args, ctx_size=ctx + CELL_PAD), gpu)
        assert not over.fits  # type: ignore[union-attr]


def test_dense_repo_lists_each_quant_ranked_with_context_and_offload(dense_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    hub, sizes = dense_hub
    code, doc = _fits(capsys, REPO, "--gpus", "1x3090")
    assert code == 0 and doc["summary"] == "FITS"
    listing = doc["models"][0]["gguf"]
    assert listing["engine"] == "llama.cpp" and listing["confidence"] == "estimated"
    assert listing["target_context"] == 4096 and (listing["cache_type_k"], listing["cache_type_v"]) == ("f16", "f16")
    quants = {q["quant"]: q for q in listing["quants"]}
    assert set(quants) == {"Q2_K", "Q4_K_M", "Q8_0", "F16"}          # split grouped, projector left out
    f16 = quants["F16"]
    assert len(f16["files"]) == 2 and f16["weights_bytes"] == sizes["F16"]
    assert f16["size_bytes"] == sum(hub.repos[REPO].files[n].size for n in f16["files"])
    gpu = _gpu_bytes()
    base = LlamaCppArgs(ctx_size=4096)
    for q in listing["quants"]:
        model = _model(hub, REPO, q["files"])
        assert q["weights_bytes"] == model.weights_bytes and q["layers"] == model.n_layer + 1
        if q["fits_fully"]:
            _check_context(model, base, q["max_ctx_full_gpu"], gpu)
            assert q["offload"] is None
            continue
        # not fully on the GPU at 4K: the fewest layers on the CPU that fit, and its largest context
        full = predict(model, base, gpu)
        assert not full.fits  # type: ignore[union-attr]
        off = q["offload"]
        assert off is not None and off["n_gpu_layers"] + off["cpu_layers"] == model.n_layer + 1
        ngl = off["n_gpu_layers"]
        assert predict(model, replace(base, n_gpu_layers=ngl), gpu).fits  # type: ignore[union-attr]
        assert not predict(model, replace(base, n_gpu_layers=ngl + 1), gpu).fits  # type: ignore[union-attr]
        _check_context(model, replace(base, n_gpu_layers=ngl), off["max_ctx"], gpu)
        assert off["host_weights_bytes"] > 0
    # ranking: the quants that fit fully first, largest (best quality) first; then offload, least on the host
    order = [q["quant"] for q in listing["quants"]]
    full = [q for q in listing["quants"] if q["fits_fully"]]
    assert order[:len(full)] == [q["quant"] for q in sorted(full, key=lambda q: -q["weights_bytes"])]
    offloaded = listing["quants"][len(full):]
    assert [o["offload"]["host_weights_bytes"] for o in offloaded] == \
        sorted(o["offload"]["host_weights_bytes"] for o in offloaded)
    assert order[0] == "Q4_K_M" and {"Q8_0", "F16"} <= {o["quant"] for o in offloaded}
    assert listing["best"] == "Q4_K_M"
    assert listing["serve"].startswith(f"llama-server -hf {REPO}:Q4_K_M -c ") and "-ngl 999" in listing["serve"]


def test_only_headers_are_read_with_range_requests(dense_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    hub, _ = dense_hub
    _fits(capsys, REPO, "--gpus", "1x3090")
    gets = [r for r in hub.requests(path_contains=".gguf") if r.method == "GET"]
    assert gets and all(r.headers.get("range") for r in gets)
    total = sum(f.size for f in hub.repos[REPO].files.values())
    assert hub.bytes_sent(path_contains=".gguf") < 0.001 * total
    assert not any("mmproj" in r.path for r in gets)


def test_cache_types_and_ctx_size_are_honoured(dense_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    hub, _ = dense_hub
    _, plain = _fits(capsys, REPO, "--gpus", "1x3090")
    _, q8 = _fits(capsys, REPO, "--gpus", "1x3090", "-ctk", "q8_0", "--cache-type-v", "q8_0")
    by = {q["quant"]: q for q in plain["models"][0]["gguf"]["quants"]}
    by8 = {q["quant"]: q for q in q8["models"][0]["gguf"]["quants"]}
    assert q8["models"][0]["gguf"]["cache_type_k"] == "q8_0"
    model = _model(hub, REPO, by8["Q4_K_M"]["files"])
    _check_context(model, LlamaCppArgs(ctx_size=4096, cache_type_k="q8_0", cache_type_v="q8_0"),
                   by8["Q4_K_M"]["max_ctx_full_gpu"], _gpu_bytes())
    assert by8["Q4_K_M"]["max_ctx_full_gpu"] >= by["Q4_K_M"]["max_ctx_full_gpu"]
    assert "-ctk q8_0 -ctv q8_0" in q8["models"][0]["gguf"]["serve"]
    # twice the trained context: the Q4_K_M no longer holds it on the GPU alone, so it is offloaded
    big = 2 * model.ctx_train
    assert not predict(model, LlamaCppArgs(ctx_size=big), _gpu_bytes()).fits  # type: ignore[union-attr]
    _, doc = _fits(capsys, REPO, "--gpus", "1x3090", "-c", str(big))
    listing = doc["models"][0]["gguf"]
    assert listing["target_context"] == big
    q4 = next(q for q in listing["quants"] if q["quant"] == "Q4_K_M")
    assert not q4["fits_fully"] and q4["offload"]["max_ctx"] >= big
    assert by["Q4_K_M"]["max_ctx_full_gpu"] <= q4["max_ctx_full_gpu"] < big


def test_human_output_lists_every_quant(dense_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["fits", REPO, "--gpus", "1x3090"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{REPO}: Q4_K_M fits on 1x RTX 3090 (llama.cpp, f16/f16 KV): fully on GPU: ")
    assert "estimated" in out[0]
    rows = [line for line in out if re.match(r"\s*\d+\. ", line)]
    assert len(rows) == 4 and "Q4_K_M" in rows[0]
    f16 = next(line for line in rows if "F16" in line)
    assert "offload: -ngl " in f16 and "(2 files)" in f16 and "host RAM" in f16
    assert any(line.startswith("serve: llama-server -hf ") for line in out)


@pytest.fixture
def moe_hub(fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    geo = {"n_layer": 48, "n_embd": 2048, "n_ff": 6144, "n_head": 32, "n_head_kv": 4, "vocab": 32000}
    files = {}
    for label, qtype, ftype in (("Q4_K_M", Q.Q4_K, 15), ("Q8_0", Q.Q8_0, 7)):
        meta = _meta("qwen3moe", **geo, ctx=40960, ftype=ftype, **{"qwen3moe.expert_count": 128,
                     "qwen3moe.expert_used_count": 8, "qwen3moe.expert_feed_forward_length": 768,
                     "qwen3moe.attention.key_length": 128, "qwen3moe.attention.value_length": 128})
        files[f"Moe-{label}.gguf"] = _virtual(tmp_path, "qwen3moe", meta, _tensors(
            **geo, qtype=qtype, head_dim=128, n_expert=128, n_ff_exp=768))
    fake_hub.add_repo(MOE_REPO, files)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    return fake_hub


def test_moe_quant_keeps_experts_on_the_cpu_when_it_cannot_fit(moe_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    code, doc = _fits(capsys, MOE_REPO, "--gpus", "1x3090")
    assert code == 0
    quants = {q["quant"]: q for q in doc["models"][0]["gguf"]["quants"]}
    q8 = quants["Q8_0"]
    model = _model(moe_hub, MOE_REPO, q8["files"])
    assert model.is_moe and model.weights_bytes > _gpu_bytes()[0]
    assert not q8["fits_fully"]
    off = q8["offload"]
    k = off["n_cpu_moe"]
    assert k >= 1 and off["n_gpu_layers"] == model.n_layer + 1       # every layer offloaded, experts on the CPU
    base = LlamaCppArgs(ctx_size=4096)
    assert predict(model, replace(base, n_cpu_moe=k), _gpu_bytes()).fits  # type: ignore[union-attr]
    assert not predict(model, replace(base, n_cpu_moe=k - 1), _gpu_bytes()).fits  # type: ignore[union-attr]
    assert off["host_weights_bytes"] >= sum(model.expert_bytes[:k])
    assert quants["Q4_K_M"]["fits_fully"] and doc["models"][0]["gguf"]["quants"][0]["quant"] == "Q4_K_M"
    main(["fits", MOE_REPO, "--gpus", "1x3090"])
    assert f"--n-cpu-moe {k}" in capsys.readouterr().out


@pytest.fixture
def swa_hub(fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    geo = {"n_layer": 62, "n_embd": 5376, "n_ff": 21504, "n_head": 32, "n_head_kv": 16, "vocab": 32000}
    extra = {"gemma3.attention.sliding_window": 1024, "gemma3.attention.key_length": 128,
             "gemma3.attention.value_length": 128}
    meta = _meta("gemma3", **geo, ctx=131072, ftype=15, **extra)
    tensors = _tensors(**geo, qtype=Q.Q4_K, head_dim=128)
    fake_hub.add_repo(SWA_REPO, {"gemma-27b-Q4_K_M.gguf": _virtual(tmp_path, "gemma3", meta, tensors)})
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    return fake_hub


def test_swa_layers_cost_their_window_only(swa_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    code, doc = _fits(capsys, SWA_REPO, "--gpus", "1x3090")
    (q,) = doc["models"][0]["gguf"]["quants"]
    model = _model(swa_hub, SWA_REPO, q["files"])
    assert sum(model.swa_layers) == 52                              # gemma3: 5 sliding layers in every 6
    assert code == 0 and q["fits_fully"]
    _check_context(model, LlamaCppArgs(ctx_size=4096), q["max_ctx_full_gpu"], _gpu_bytes())
    # the same weights without sliding windows hold far less context
    dense = replace(model, swa_window=None, swa_layers=(False,) * model.n_layer)
    from club3090.fit.llamacpp import largest_context

    plain = largest_context(dense, LlamaCppArgs(ctx_size=4096), _gpu_bytes())
    assert plain is not None and q["max_ctx_full_gpu"] > 2 * plain


def test_a_tiny_real_model_fits_at_its_trained_context(fake_hub, tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    files = {}
    for label, qtype in (("Q8_0", Q.Q8_0), ("F16", Q.F16)):
        (path,) = write(tmp_path / label, f"tiny-{label}", Spec(n_layer=2, weight_type=qtype, ctx_train=4096))
        files[path.name] = path.read_bytes()
    fake_hub.add_repo(TINY_REPO, files)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    code, doc = _fits(capsys, TINY_REPO, "--gpus", "1x3090")
    quants = doc["models"][0]["gguf"]["quants"]
    assert code == 0 and [q["quant"] for q in quants] == ["F16", "Q8_0"]    # both fit: the larger first
    assert all(q["fits_fully"] and q["max_ctx_full_gpu"] == 4096 for q in quants)
    main(["fits", TINY_REPO, "--gpus", "1x3090"])
    assert "(the model's maximum)" in capsys.readouterr().out


def test_header_budget_leaves_quants_unread_not_guessed(dense_hub, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    hub, _ = dense_hub
    first = min(f.size for n, f in hub.repos[REPO].files.items() if n.endswith(".gguf") and "mmproj" not in n)
    assert first
    monkeypatch.setattr(gguf_remote, "REPO_HEADER_BUDGET", gguf_remote.FIRST_READ_BYTES)
    code, doc = _fits(capsys, REPO, "--gpus", "1x3090")
    quants = doc["models"][0]["gguf"]["quants"]
    read = [q for q in quants if q["stop"] is None]
    unread = [q for q in quants if q["stop"] is not None]
    assert code == 0 and len(read) == 1 and read[0]["quant"] == "Q2_K"              # the smallest is read first
    assert unread and all("header budget" in q["stop"] and not q["fits_fully"] for q in unread)
    assert quants[-len(unread):] == unread                             # unpriced quants rank last


@pytest.fixture
def mixed_hub(fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    repo = fake_hub.add_fixture("Qwen--Qwen3-8B")
    (path,) = write(tmp_path, "qwen3-8b-Q8_0", Spec(n_layer=2, weight_type=Q.Q8_0))
    repo.files[path.name] = FakeFile(name=path.name, prefix=path.read_bytes(), size=path.stat().st_size, lfs=True)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    return fake_hub


def test_mixed_repo_prices_safetensors_and_says_gguf_exists(mixed_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    code, doc = _fits(capsys, "Qwen/Qwen3-8B", "--gpus", "1x3090")
    row = doc["models"][0]
    assert row["gguf"] is None and row["max_model_len"] and row["gguf_files"] == ["qwen3-8b-Q8_0.gguf"]
    main(["fits", "Qwen/Qwen3-8B", "--gpus", "1x3090"])
    out = capsys.readouterr().out
    assert "also holds 1 GGUF file" in out and "--gguf" in out
    code, doc = _fits(capsys, "Qwen/Qwen3-8B", "--gpus", "1x3090", "--gguf")
    listing = doc["models"][0]["gguf"]
    assert code == 0 and [q["quant"] for q in listing["quants"]] == ["Q8_0"]


def test_sibling_quants_are_read_around_their_shared_tokenizer(fake_hub, tmp_path: Path, monkeypatch,
                                                              capsys) -> None:  # type: ignore[no-untyped-def]
    """The smallest quant's header is read whole; another quant of the same model costs its first
    bytes and its tensor table only (the tokenizer is the same), checked by shape and file size; a
    file that is not such a sibling (another vocabulary) is read whole, and priced from its own bytes."""
    files, headers = {}, {}
    for label, qtype, vocab in (("Q4_0", Q.Q4_0, 6000), ("Q8_0", Q.Q8_0, 6000), ("Q5_K_M", Q.Q5_K, 6000),
                                ("F16", Q.F16, 7000)):
        (path,) = write(tmp_path / label, f"voc-{label}", Spec(n_layer=2, weight_type=qtype, n_vocab=vocab))
        files[path.name] = path.read_bytes()
        headers[path.name] = parse_header(files[path.name], file=path.name)
    fake_hub.add_repo("acme/Vocab-GGUF", files)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setattr(gguf_remote, "FIRST_READ_BYTES", 4096)    # far shorter than these headers
    assert all(h.header_bytes > 8 * 4096 for h in headers.values())
    code, doc = _fits(capsys, "acme/Vocab-GGUF", "--gpus", "1x3090")
    quants = {q["files"][0]: q for q in doc["models"][0]["gguf"]["quants"]}
    assert code == 0 and set(quants) == set(files)
    for name, q in quants.items():                                # each priced from its own tensors
        assert q["weights_bytes"] == sum(t.nbytes for t in headers[name].tensors)
    served = fake_hub.repos["acme/Vocab-GGUF"].files               # LFS files answer from /cdn/<sha256>
    ranged = [r for r in fake_hub.requests("GET") if r.status == 206]
    got = {name: sum(r.sent for r in ranged if name in r.path or served[name].sha256 in r.path) for name in files}
    calls = {name: sum(1 for r in ranged if name in r.path or served[name].sha256 in r.path) for name in files}
    assert calls["voc-Q4_0.gguf"] > 1 and got["voc-Q4_0.gguf"] >= headers["voc-Q4_0.gguf"].header_bytes
    for sibling in ("voc-Q8_0.gguf", "voc-Q5_K_M.gguf"):           # the latter's longer name shifts its table
        assert calls[sibling] == 2 and got[sibling] < headers[sibling].header_bytes // 4
    assert got["voc-F16.gguf"] >= headers["voc-F16.gguf"].header_bytes     # not a sibling: read whole


def test_a_catalog_model_whose_weights_are_a_gguf_lists_its_quant(fake_hub, tmp_path: Path, monkeypatch,
                                                                   capsys) -> None:  # type: ignore[no-untyped-def]
    """One catalog model asked about, its default weights a GGUF: its repo's quant file is priced
    (the ranking of the whole catalog stays offline and keeps the stop)."""
    from club3090.catalog import load_catalog

    catalog = load_catalog()
    model_id, variant = next((m.id, m.weights[m.default_weight_variant]) for m in catalog.models.values()
                             if m.weights.get(m.default_weight_variant) is not None
                             and m.weights[m.default_weight_variant].format == "gguf"
                             and m.weights[m.default_weight_variant].hf_repos)
    files = {name: _virtual(tmp_path, "llama", _meta("llama", **DENSE, ctx=32768, ftype=15),
                            _tensors(**DENSE, qtype=Q.Q4_K)) for name in variant.files}
    files["other-Q8_0.gguf"] = _virtual(tmp_path, "llama", _meta("llama", **DENSE, ctx=32768, ftype=7),
                                        _tensors(**DENSE, qtype=Q.Q8_0))
    fake_hub.add_repo(variant.hf_repos[0], files)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    code, doc = _fits(capsys, model_id, "--gpus", "1x3090")
    row = doc["models"][0]
    assert row["model"] == model_id and row["repo"] == variant.hf_repos[0]
    assert [q["files"] for q in row["gguf"]["quants"]] == [list(variant.files)]   # the variant's file only
    assert code == (0 if row["gguf"]["quants"][0]["fits_fully"] else 2)


def test_quant_prices_one_quant_and_reads_only_its_files(dense_hub, capsys) -> None:  # type: ignore[no-untyped-def]
    hub, _ = dense_hub
    code, doc = _fits(capsys, REPO, "--gpus", "1x3090", "--quant", "f16")
    quants = doc["models"][0]["gguf"]["quants"]
    assert [q["quant"] for q in quants] == ["F16"] and code == 2          # offload only: not a full fit
    served = hub.repos[REPO].files
    read = {n for n, f in served.items()
            if any(n in r.path or f.sha256 in r.path for r in hub.requests("GET") if r.status == 206)}
    assert read == set(quants[0]["files"])
    code, doc = _fits(capsys, REPO, "--gpus", "1x3090", "--quant", "Q5_K_M")
    assert code == 2 and "no GGUF quant 'Q5_K_M'" in doc["models"][0]["stop"]
