"""GGUF headers by range reads from the loopback Hub, from a local file and from the HF cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from club3090.edges import gguf_remote
from club3090.edges.hub import HubClient
from club3090.errors import InputError
from club3090.model.gguf import parse_header
from tests.fakehub import FakeFile
from tests.gguf_fixtures import Q, Spec, write


def _served(path: Path) -> FakeFile:
    """The real header bytes, then virtual zeros up to the real size (the Hub never sends them)."""
    data = path.read_bytes()
    head = parse_header(data, file=path.name).header_bytes
    return FakeFile(name=path.name, prefix=data[:head], size=len(data), lfs=True)


@pytest.fixture
def quant_repo(fake_hub, tmp_path: Path):  # type: ignore[no-untyped-def]
    files: dict[str, object] = {"README.md": b"# tiny\n"}
    for qtype, label in ((Q.Q4_K, "Q4_K_M"), (Q.Q8_0, "Q8_0")):
        (p,) = write(tmp_path, f"Tiny-{label}", Spec(weight_type=qtype, n_vocab=2000))
        files[p.name] = _served(p)
    for p in write(tmp_path / "split", "Tiny-Q6_K", Spec(weight_type=Q.Q6_K, split_max_tensors=8, n_vocab=2000)):
        files[f"Q6_K/{p.name}"] = _served(p)
    (mm,) = write(tmp_path, "mmproj-F16", Spec())
    files[mm.name] = _served(mm)
    fake_hub.add_repo("org/Tiny-GGUF", files)
    return fake_hub


def test_repo_lists_each_quant(quant_repo) -> None:  # type: ignore[no-untyped-def]
    client = HubClient(quant_repo.settings(), retries=0)
    quants = gguf_remote.list_quants(client.repo_info("org/Tiny-GGUF", None))
    assert [q.label for q in quants] == ["Q6_K", "Q4_K_M", "Q8_0"]
    q6 = quants[0]
    assert len(q6.files) > 2 and all(f.startswith("Q6_K/Tiny-Q6_K-000") for f in q6.files)
    assert all(q.size_bytes and q.size_bytes > 0 for q in quants)


def test_headers_are_read_by_ranges_only(quant_repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(gguf_remote, "FIRST_READ_BYTES", 4096)   # make the header need several reads
    client = HubClient(quant_repo.settings(), retries=0)
    info = client.repo_info("org/Tiny-GGUF", None)
    quants = {q.label: q for q in gguf_remote.list_quants(info)}
    quant_repo.clear_log()
    model = gguf_remote.load_remote(client, info, quants["Q6_K"])
    assert model.type_bytes["Q6_K"] > 0 and model.n_vocab == 2000
    local = gguf_remote.load_local(sorted((tmp_path / "split").glob("Tiny-Q6_K-*.gguf"))[1])
    assert (model.weights_bytes, model.layer_bytes, model.kv_layers) == \
        (local.weights_bytes, local.layer_bytes, local.kv_layers)
    gets = [r for r in quant_repo.requests("GET") if r.path.endswith(".gguf") or "/cdn/" in r.path]
    assert gets and all(r.headers.get("range") for r in gets)
    assert len(gets) > len(quants["Q6_K"].files)          # the first 4 KiB did not hold the table
    header_total = sum(len(f.prefix) for f in quant_repo.repos["org/Tiny-GGUF"].files.values())
    assert quant_repo.bytes_sent() < header_total * 2 + 65536


def test_truncated_remote_file_is_an_input_error(fake_hub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (p,) = write(tmp_path, "Cut-Q8_0", Spec())
    data = p.read_bytes()
    fake_hub.add_repo("org/Cut", {"Cut-Q8_0.gguf": data[:200]})
    client = HubClient(fake_hub.settings(), retries=0)
    info = client.repo_info("org/Cut", None)
    (quant,) = gguf_remote.list_quants(info)
    with pytest.raises(InputError):
        gguf_remote.load_remote(client, info, quant)


def test_local_split_needs_every_shard(tmp_path: Path) -> None:
    paths = write(tmp_path, "m", Spec(n_layer=4, split_max_tensors=10))
    paths[-1].unlink()
    with pytest.raises(InputError, match="missing"):
        gguf_remote.load_local(paths[0])
    with pytest.raises(InputError, match="cannot read"):
        gguf_remote.load_local(tmp_path / "absent.gguf")


def test_from_the_hf_cache(fake_hub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from huggingface_hub import hf_hub_download

    (p,) = write(tmp_path, "C-Q4_0", Spec(weight_type=Q.Q4_0))
    fake_hub.add_repo("org/C", {"C-Q4_0.gguf": p.read_bytes()})
    settings = fake_hub.settings()
    assert gguf_remote.read_cached("org/C", ["C-Q4_0.gguf"], None, settings.hub_cache) is None
    hf_hub_download("org/C", "C-Q4_0.gguf", cache_dir=settings.hub_cache, endpoint=fake_hub.url)
    model = gguf_remote.read_cached("org/C", ["C-Q4_0.gguf"], None, settings.hub_cache)
    assert model is not None and model.type_bytes["Q4_0"] > 0
