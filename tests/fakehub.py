"""A loopback fake Hugging Face Hub for hermetic tests (a test fixture, not product code).

The real ``huggingface_hub`` client talks to it exactly as it talks to huggingface.co: the
routes, headers and error codes are those of ``STYLE.md`` section 12. Safetensors files are
*virtual*: real header bytes followed by zeros generated on demand, so a 16 GB repo costs
kilobytes of memory and a test can assert, from the request log, that only headers were read.

Use it from any test (``tests/conftest.py`` loads this module as a pytest plugin)::

    def test_something(fake_hub):
        fake_hub.add_fixture("meta-llama--Llama-3.1-8B")          # real config + index, synthesised shards
        settings = fake_hub.settings()                             # Settings pointed at the fake
        spec = derive.derive("meta-llama/Llama-3.1-8B", settings)
        assert fake_hub.bytes_sent() < 2_000_000
        assert all(r.headers.get("range") for r in fake_hub.requests(path_contains=".safetensors"))

Or through the CLI: ``monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)`` then ``cli.main([...])``.

Building repos:
- ``add_fixture(folder, repo_id=None, tensors=None, shards=None, ...)``: a folder of
  ``tests/fixtures/hub``; shards come from the real index ``weight_map`` (shapes guessed
  from the config) unless ``tensors`` (name -> (dtype, shape)) is given.
- ``add_repo(repo_id, files)``: any files (``bytes`` or ``FakeFile``); ``safetensors_file(name,
  tensors)`` builds a virtual safetensors file; ``synth_table(config)`` a plausible tensor table.
- Gated / private repos: ``gated=True`` / ``private=True``; ``accept_token(token)`` lets a token in.

Faults and quirks:
- ``fault(kind, match="", times=1, delay=...)`` with kind ``slow`` (sleep ``delay`` seconds before
  answering), ``drop`` (close without an answer), ``500``/``503`` (error status), ``truncate``
  (promise the full Content-Length, send half, close), ``short`` (a consistent 206 covering half
  of the asked range), ``stall`` (a file body download only, not a header read with a closed range:
  send half, then hold the connection for ``delay`` seconds before closing it: a process killed
  meanwhile is killed mid-file). ``match`` is a substring of the request path; ``times=None`` = forever.
- ``quirks``: ``ignore_range`` (answer ranged GETs with 200 + the whole body), ``lfs_redirect``
  (default True: LFS files answer 302 to a ``/cdn/`` URL on ``localhost``, another origin),
  ``no_commit`` / ``no_etag`` (omit ``X-Repo-Commit`` / ``ETag``), ``no_error_code`` (omit
  ``X-Error-Code`` on errors).

The request log (``fake_hub.log``, ``requests(...)``, ``bytes_sent(...)``) records method, path,
query, lower-cased headers, status and body bytes sent for every request. A request enters the log
when it is received, and its status and byte count are updated *before* the bytes go out, so
once the client has its answer the log already shows it (a handler thread may still be running:
recording in its ``finally`` raced the test's assertions).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from tests.fixtures_path import FIXTURES as FIXTURE_ROOT
from tests.safetensors_fixtures import build as build_safetensors_header

FIXTURES = Path(os.environ.get("CLUB3090_HUB_FIXTURES", str(FIXTURE_ROOT / "hub")))
CHUNK = 64 * 1024

DTYPE_OF_TORCH = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "half": "F16", "float": "F32"}


# --------------------------------------------------------------------------------------------
# files and repos
# --------------------------------------------------------------------------------------------
@dataclass
class FakeFile:
    """A file: ``prefix`` real bytes, then zeros up to ``size``."""

    name: str
    prefix: bytes
    size: int
    lfs: bool = False
    _sha256: str | None = None

    @property
    def git_oid(self) -> str:
        return hashlib.sha1(b"blob %d\0" % self.size + self.prefix).hexdigest()

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            digest = hashlib.sha256(self.prefix)
            zeros = self.size - len(self.prefix)
            block = bytes(min(zeros, 1 << 20))
            while zeros > 0 and self.size <= 256 * 1024 * 1024:  # real digest for small files
                step = min(zeros, len(block))
                digest.update(block[:step])
                zeros -= step
            if zeros > 0:  # huge virtual file: a stable stand-in (never downloaded whole in tests)
                digest = hashlib.sha256(self.prefix + str(self.size).encode())
            self._sha256 = digest.hexdigest()
        return self._sha256

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``start``..``end`` inclusive, in chunks."""
        pos = start
        while pos <= end:
            stop = min(end + 1, pos + CHUNK)
            if pos < len(self.prefix):
                piece = self.prefix[pos:min(stop, len(self.prefix))]
                piece += bytes(stop - pos - len(piece))
            else:
                piece = bytes(stop - pos)
            yield piece
            pos = stop


@dataclass
class FakeRepo:
    repo_id: str
    commit: str
    files: dict[str, FakeFile]
    gated: bool = False
    private: bool = False
    revisions: dict[str, str] = field(default_factory=dict)  # branch/tag -> commit
    info_extra: dict[str, Any] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        if revision in ("main", self.commit):
            return self.commit
        if revision in self.revisions.values():
            return revision
        return self.revisions.get(revision)


@dataclass
class Fault:
    kind: str                 # slow | drop | 500 | 503 | truncate | short | stall
    match: str = ""
    times: int | None = 1
    delay: float = 2.0
    method: str | None = None

    def hit(self, method: str, path: str) -> bool:
        if self.times == 0 or self.match not in path or (self.method and self.method != method):
            return False
        if self.times is not None:
            self.times -= 1
        return True


@dataclass
class Quirks:
    ignore_range: bool = False
    lfs_redirect: bool = True
    no_commit: bool = False
    no_etag: bool = False
    no_error_code: bool = False


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    status: int = 0
    sent: int = 0


def safetensors_file(name: str, tensors: Mapping[str, tuple[str, Any]], *,
                     metadata: Mapping[str, str] | None = None, lfs: bool = True) -> FakeFile:
    """A virtual safetensors file: real header, zero data; the size covers every byte range."""
    head, data_len = build_safetensors_header(tensors, metadata)
    return FakeFile(name=name, prefix=head, size=len(head) + data_len, lfs=lfs)


def header_sum(tensors: Mapping[str, tuple[str, Any]]) -> int:
    """Expected weight bytes of a tensor table (what the header byte ranges add up to)."""
    _, data_len = build_safetensors_header(tensors)
    return data_len


# --------------------------------------------------------------------------------------------
# plausible tensor tables
# --------------------------------------------------------------------------------------------
def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, Mapping) else config


def _geom(config: Mapping[str, Any]) -> dict[str, int]:
    c = _text(config)
    h = int(c.get("hidden_size") or c.get("n_embd") or 1024)
    heads = int(c.get("num_attention_heads") or c.get("n_head") or 16)
    kv = int(c.get("num_key_value_heads") or heads)
    hd = int(c.get("head_dim") or h // heads)
    inter = int(c.get("intermediate_size") or 4 * h)
    moe = int(c.get("moe_intermediate_size") or inter)
    experts = int(c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts") or 0)
    return {"h": h, "heads": heads, "kv": kv, "hd": hd, "inter": inter, "moe": moe, "experts": experts,
            "vocab": int(c.get("vocab_size") or 32000), "layers": int(c.get("num_hidden_layers") or 2)}


def guess_shape(name: str, config: Mapping[str, Any]) -> list[int]:
    """A shape for a tensor name of a llama-like checkpoint (exact for Llama/Mistral/Mixtral)."""
    g = _geom(config)
    h, hd = g["h"], g["hd"]
    expert = ".experts." in name or "block_sparse_moe.experts" in name
    inter = g["moe"] if expert and "moe_intermediate_size" in _text(config) else g["inter"]
    rules: list[tuple[str, list[int]]] = [
        (r"(embed_tokens|wte|lm_head)\.weight$", [g["vocab"], h]),
        (r"qkv_proj\.weight$", [(g["heads"] + 2 * g["kv"]) * hd, h]),       # Phi-3 fused q/k/v
        (r"gate_up_proj\.weight$", [2 * inter, h]),                         # Phi-3 fused gate/up
        (r"q_proj\.weight$", [g["heads"] * hd, h]),
        (r"(k_proj|v_proj)\.weight$", [g["kv"] * hd, h]),
        (r"q_proj\.bias$", [g["heads"] * hd]),
        (r"(k_proj|v_proj)\.bias$", [g["kv"] * hd]),
        (r"o_proj\.weight$", [h, g["heads"] * hd]),
        (r"(gate_proj|up_proj|w1|w3)\.weight$", [inter, h]),
        (r"(down_proj|w2)\.weight$", [h, inter]),
        (r"(block_sparse_moe|mlp)\.gate\.weight$", [max(g["experts"], 1), h]),
    ]
    for pattern, shape in rules:
        if re.search(pattern, name):
            return shape
    return [h]


def table_from_index(index: Mapping[str, Any], config: Mapping[str, Any],
                     dtype: str | None = None) -> dict[str, dict[str, tuple[str, list[int]]]]:
    """Per-shard tensor tables from an index ``weight_map`` (shapes from ``guess_shape``)."""
    dtype = dtype or DTYPE_OF_TORCH.get(str(_text(config).get("torch_dtype") or config.get("torch_dtype")
                                            or config.get("dtype") or "bfloat16"), "BF16")
    shards: dict[str, dict[str, tuple[str, list[int]]]] = {}
    for name, shard in index["weight_map"].items():
        shards.setdefault(shard, {})[name] = (dtype, guess_shape(name, config))
    return shards


def synth_table(config: Mapping[str, Any], *, dtype: str | None = None, prefix: str = "model.",
                fused_experts: bool = False, layers: int | None = None,
                mtp_layers: int = 0) -> dict[str, tuple[str, list[int]]]:
    """A plausible llama-style table for ``config``: attention (MLA when ``kv_lora_rank``),
    dense or MoE MLP (per-expert or fused), norms, embeddings, optional ``mtp.*`` layers."""
    c = _text(config)
    g = _geom(config)
    dtype = dtype or DTYPE_OF_TORCH.get(str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"), "BF16")
    h, hd = g["h"], g["hd"]
    t: dict[str, tuple[str, list[int]]] = {f"{prefix}embed_tokens.weight": (dtype, [g["vocab"], h])}
    layer_types = c.get("layer_types") or []

    def block(p: str, i: int) -> None:
        t[f"{p}input_layernorm.weight"] = (dtype, [h])
        t[f"{p}post_attention_layernorm.weight"] = (dtype, [h])
        kind = layer_types[i] if i < len(layer_types) else "full_attention"
        if c.get("kv_lora_rank"):
            rope, nope = int(c["qk_rope_head_dim"]), int(c["qk_nope_head_dim"])
            v, r = int(c["v_head_dim"]), int(c["kv_lora_rank"])
            t[f"{p}self_attn.q_proj.weight"] = (dtype, [g["heads"] * (rope + nope), h])
            t[f"{p}self_attn.kv_a_proj_with_mqa.weight"] = (dtype, [r + rope, h])
            t[f"{p}self_attn.kv_a_layernorm.weight"] = (dtype, [r])
            t[f"{p}self_attn.kv_b_proj.weight"] = (dtype, [g["heads"] * (nope + v), r])
            t[f"{p}self_attn.o_proj.weight"] = (dtype, [h, g["heads"] * v])
        elif kind == "linear_attention":
            kd = int(c.get("linear_key_head_dim") or 128) * int(c.get("linear_num_key_heads") or 16)
            vd = int(c.get("linear_value_head_dim") or 128) * int(c.get("linear_num_value_heads") or 32)
            t[f"{p}linear_attn.in_proj_qkvz.weight"] = (dtype, [2 * kd + 2 * vd, h])
            t[f"{p}linear_attn.out_proj.weight"] = (dtype, [h, vd])
            t[f"{p}linear_attn.A_log"] = ("F32", [int(c.get("linear_num_value_heads") or 32)])
        else:
            for proj, rows in (("q", g["heads"] * hd), ("k", g["kv"] * hd), ("v", g["kv"] * hd)):
                t[f"{p}self_attn.{proj}_proj.weight"] = (dtype, [rows, h])
            t[f"{p}self_attn.o_proj.weight"] = (dtype, [h, g["heads"] * hd])
        dense = g["experts"] == 0 or i < int(c.get("first_k_dense_replace") or 0)
        if dense:
            for proj in ("gate", "up"):
                t[f"{p}mlp.{proj}_proj.weight"] = (dtype, [g["inter"], h])
            t[f"{p}mlp.down_proj.weight"] = (dtype, [h, g["inter"]])
            return
        e, m = g["experts"], g["moe"]
        t[f"{p}mlp.gate.weight"] = (dtype, [e, h])
        if fused_experts:
            t[f"{p}mlp.experts.gate_up_proj"] = (dtype, [e, 2 * m, h])
            t[f"{p}mlp.experts.down_proj"] = (dtype, [e, h, m])
        else:
            for j in range(e):
                for proj in ("gate", "up"):
                    t[f"{p}mlp.experts.{j}.{proj}_proj.weight"] = (dtype, [m, h])
                t[f"{p}mlp.experts.{j}.down_proj.weight"] = (dtype, [h, m])
        shared = c.get("shared_expert_intermediate_size") or (
            int(c.get("n_shared_experts") or 0) * m)
        if shared:
            for proj in ("gate", "up"):
                t[f"{p}mlp.shared_expert.{proj}_proj.weight"] = (dtype, [int(shared), h])
            t[f"{p}mlp.shared_expert.down_proj.weight"] = (dtype, [h, int(shared)])

    for i in range(layers if layers is not None else g["layers"]):
        block(f"{prefix}layers.{i}.", i)
    for i in range(mtp_layers):
        block(f"mtp.layers.{i}.", 0)
    t[f"{prefix}norm.weight"] = (dtype, [h])
    if not c.get("tie_word_embeddings"):
        t["lm_head.weight"] = (dtype, [g["vocab"], h])
    return t


def fp8_block_table(table: Mapping[str, tuple[str, Any]]) -> dict[str, tuple[str, Any]]:
    """DeepSeek-V3's FP8 layout: 2-D projections in F8_E4M3 plus an F32 ``weight_scale_inv`` per
    128x128 block; everything else stays as it was."""
    out: dict[str, tuple[str, Any]] = {}
    for name, (dtype, shape) in table.items():
        if name.endswith("proj.weight") and len(shape) == 2:
            out[name] = ("F8_E4M3", shape)
            out[name + "_scale_inv"] = ("F32", [math.ceil(shape[0] / 128), math.ceil(shape[1] / 128)])
        else:
            out[name] = (dtype, shape)
    return out


def add_deepseek_v3_layout(hub: "FakeHub", *, repo_id: str = "deepseek-ai/DeepSeek-V3",
                           shards: int = 163) -> FakeRepo:
    """The DeepSeek-V3 repo layout: 61 layers + the MTP layer (``layers.61``), per-expert FP8
    weights with block scales, split over ``shards`` files (163 on the Hub) with an index."""
    config = json.loads((FIXTURES / "deepseek-ai--DeepSeek-V3" / "config.json").read_bytes())
    table = fp8_block_table(synth_table(config, layers=int(config["num_hidden_layers"]) + 1))
    return hub.add_fixture("deepseek-ai--DeepSeek-V3", repo_id=repo_id, tensors=table, shards=shards)


def split_shards(table: Mapping[str, tuple[str, Any]], shards: int,
                 pattern: str = "model-{i:05d}-of-{n:05d}.safetensors") -> dict[str, dict[str, tuple[str, Any]]]:
    names = list(table)
    per = math.ceil(len(names) / shards)
    out: dict[str, dict[str, tuple[str, Any]]] = {}
    for k in range(shards):
        chunk = names[k * per:(k + 1) * per]
        out[pattern.format(i=k + 1, n=shards)] = {n: table[n] for n in chunk}
    return out


# --------------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    hub: "FakeHub"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        self._dispatch(body=True)

    def do_HEAD(self) -> None:
        self._dispatch(body=False)

    # -- helpers ----------------------------------------------------------------------------
    def _dispatch(self, body: bool) -> None:
        hub = self.server.hub
        split = urlsplit(self.path)
        raw_path = split.path
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._entry = {"method": self.command, "path": unquote(raw_path), "query": split.query,
                       "headers": headers, "status": 0, "sent": 0}
        hub._record(self._entry)  # now, not when the handler ends: see the module docstring
        try:
            if hub.latency_s > 0:  # a simulated round trip (benchmarks), before any answer byte
                time.sleep(hub.latency_s)
            fault = hub._take_fault(self.command, unquote(raw_path))
            if fault is not None and fault.kind == "slow":
                time.sleep(fault.delay)
                fault = None
            if fault is not None and fault.kind == "drop":
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault is not None and fault.kind in ("500", "503"):
                self._reply(int(fault.kind), {"Content-Type": "application/json"},
                            json.dumps({"error": "Internal Error"}).encode(), body)
                return
            self._fault = fault
            self._route(raw_path, split.query, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _write(self, data: bytes) -> None:
        """Send body bytes, counted first: the client may act on them before this thread resumes."""
        self._entry["sent"] += len(data)
        try:
            self.wfile.write(data)
        except OSError:
            self._entry["sent"] -= len(data)
            raise

    def _reply(self, status: int, headers: Mapping[str, str], payload: bytes, body: bool) -> None:
        self._entry["status"] = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body and payload:
            self._write(payload)

    def _error(self, status: int, code: str | None, message: str, body: bool,
               extra: Mapping[str, str] | None = None) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message,
                   "X-Request-Id": f"fake-{time.monotonic_ns()}"}
        if code and not self.server.hub.quirks.no_error_code:
            headers["X-Error-Code"] = code
        headers.update(extra or {})
        self._reply(status, headers, json.dumps({"error": message}).encode(), body)

    def _token(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth[7:] if auth.lower().startswith("bearer ") else None

    # -- routes -----------------------------------------------------------------------------
    def _route(self, raw_path: str, query: str, body: bool) -> None:
        parts = [unquote(p) for p in raw_path.strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self._api(parts[2] + "/" + parts[3], parts[4:], query, body)
        if parts and parts[0] == "cdn" and len(parts) == 2:
            return self._cdn(parts[1], body)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), body)
        return self._error(404, "RepoNotFound", "Repository not found", body)

    def _repo(self, repo_id: str, body: bool, *, files: bool) -> FakeRepo | None:
        hub = self.server.hub
        repo = hub.repos.get(repo_id)
        token = self._token()
        if repo is None or (repo.private and token not in hub.accepted_tokens):
            self._error(404, "RepoNotFound", "Repository not found", body)
            return None
        if files and repo.gated and token not in hub.accepted_tokens:
            status = 403 if token else 401
            self._error(status, "GatedRepo", f"Access to model {repo_id} is restricted.", body)
            return None
        return repo

    def _api(self, repo_id: str, rest: list[str], query: str, body: bool) -> None:
        repo = self._repo(repo_id, body, files=False)
        if repo is None:
            return
        revision = "main"
        if rest[:1] == ["revision"] and len(rest) >= 2:
            revision = rest[1]
        elif rest[:1] == ["tree"] and len(rest) >= 2:
            return self._tree(repo, rest[1], "/".join(rest[2:]), body)
        elif rest:
            return self._error(404, None, "Not found", body)
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
        blobs = "blobs=true" in query
        siblings = []
        for f in repo.files.values():
            item: dict[str, Any] = {"rfilename": f.name}
            if blobs:
                item.update(size=f.size, blobId=f.git_oid)
                if f.lfs:
                    item["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
            siblings.append(item)
        info = {"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit, "private": repo.private,
                "gated": "manual" if repo.gated else False, "disabled": False, "tags": [],
                "siblings": siblings, **repo.info_extra}
        self._reply(200, {"Content-Type": "application/json"}, json.dumps(info).encode(), body)

    def _tree(self, repo: FakeRepo, revision: str, sub: str, body: bool) -> None:
        if repo.resolve(revision) is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
        entries = []
        for f in repo.files.values():
            if sub and not f.name.startswith(sub.rstrip("/") + "/"):
                continue
            item: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.name}
            if f.lfs:
                item["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            entries.append(item)
        self._reply(200, {"Content-Type": "application/json"}, json.dumps(entries).encode(), body)

    def _resolve(self, repo_id: str, revision: str, filename: str, body: bool) -> None:
        hub = self.server.hub
        repo = self._repo(repo_id, body, files=True)
        if repo is None:
            return
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
        f = repo.files.get(filename)
        if f is None:
            return self._error(404, "EntryNotFound", f"{filename} does not exist", body,
                               {"X-Repo-Commit": commit})
        common: dict[str, str] = {}
        if not hub.quirks.no_commit:
            common["X-Repo-Commit"] = commit
        if f.lfs and hub.quirks.lfs_redirect:
            common.update({"Location": f"{hub.cdn_url}/cdn/{f.sha256}", "X-Linked-Size": str(f.size)})
            if not hub.quirks.no_etag:
                common.update({"X-Linked-Etag": f'"{f.sha256}"', "ETag": f'"{f.git_oid}"'})
            return self._reply(302, common, b"", body)
        if not hub.quirks.no_etag:
            common["ETag"] = f'"{f.sha256 if f.lfs else f.git_oid}"'
        self._send_file(f, common, body)

    def _cdn(self, sha256: str, body: bool) -> None:
        f = self.server.hub._by_sha(sha256)
        if f is None:
            return self._error(404, None, "Not found", body)
        self._send_file(f, {"ETag": f'"{sha256}"'}, body)

    def _send_file(self, f: FakeFile, headers: dict[str, str], body: bool) -> None:
        hub = self.server.hub
        fault: Fault | None = getattr(self, "_fault", None)
        start, end, status = 0, f.size - 1, 200
        spec = self.headers.get("range")
        if spec and not hub.quirks.ignore_range:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", spec.strip())
            if m is None:
                return self._error(416, None, "Bad range", body, {"Content-Range": f"bytes */{f.size}"})
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else f.size - 1, f.size - 1)
            if start >= f.size or start > end:
                return self._error(416, None, "Range not satisfiable", body,
                                   {"Content-Range": f"bytes */{f.size}"})
            status = 206
            if fault is not None and fault.kind == "short":
                end = start + max(0, (end - start + 1) // 2 - 1)
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{f.size}"}
        length = end - start + 1 if f.size else 0
        self._entry["status"] = status
        self.send_response(status)
        for k, v in {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", **headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if not body or length == 0:
            return
        stall = fault is not None and fault.kind == "stall" and not (spec or "-").strip().split("-")[-1]
        limit = length // 2 if fault is not None and (fault.kind == "truncate" or stall) else length
        for piece in f.chunks(start, start + limit - 1) if limit else ():
            self._write(piece)
        if limit < length:
            self.wfile.flush()
            if stall:
                assert fault is not None
                time.sleep(fault.delay)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)


class FakeHub:
    """State of one fake Hub (repos, faults, quirks, log) and its loopback server."""

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.faults: list[Fault] = []
        self.quirks = Quirks()
        self.accepted_tokens: set[str] = set()
        self._entries: list[dict[str, Any]] = []  # live: handler threads update status / sent
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.cdn_url = ""
        self.latency_s = 0.0  # added before every answer: a simulated network round trip

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "FakeHub":
        server = _Server(("127.0.0.1", 0), _Handler)
        server.hub = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-hub", daemon=True)
        self._thread.start()
        port = server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        self.cdn_url = f"http://localhost:{port}"  # another origin: redirects drop authorization
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None

    # -- repos --------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: Mapping[str, bytes | FakeFile], *, gated: bool = False,
                 private: bool = False, commit: str | None = None,
                 revisions: Mapping[str, str] | None = None, **info_extra: Any) -> FakeRepo:
        built: dict[str, FakeFile] = {}
        for name, content in files.items():
            if isinstance(content, FakeFile):
                content.name = name
                built[name] = content
            else:
                built[name] = FakeFile(name=name, prefix=bytes(content), size=len(content),
                                       lfs=name.endswith((".safetensors", ".gguf", ".bin")))
        commit = commit or hashlib.sha1(repo_id.encode()).hexdigest()
        repo = FakeRepo(repo_id=repo_id, commit=commit, files=built, gated=gated, private=private,
                        revisions=dict(revisions or {}), info_extra=dict(info_extra))
        self.repos[repo_id] = repo
        return repo

    def add_fixture(self, folder: str, *, repo_id: str | None = None,
                    tensors: Mapping[str, tuple[str, Any]] | None = None, shards: int | None = None,
                    dtype: str | None = None, with_index: bool = True,
                    extra_files: Mapping[str, bytes | FakeFile] | None = None,
                    drop_files: tuple[str, ...] = (), metadata_files: bool = True,
                    **repo_kwargs: Any) -> FakeRepo:
        """Register fixture ``folder`` (e.g. ``meta-llama--Llama-3.1-8B``) as ``repo_id``.

        Safetensors come from, in order: ``tensors`` (one ``model.safetensors``, or ``shards``
        files plus a generated index), else the fixture's index ``weight_map`` with guessed
        shapes, else ``synth_table(config)`` as one file. ``metadata_files`` adds small
        tokenizer/generation files so the download set looks like a real repo's.
        """
        src = FIXTURES / folder
        config_raw = (src / "config.json").read_bytes()
        config = json.loads(config_raw)
        repo_id = repo_id or folder.replace("--", "/", 1)
        files: dict[str, bytes | FakeFile] = {"config.json": config_raw}
        for extra in ("quantize_config.json", "hf_quant_config.json"):
            if (src / extra).exists():
                files[extra] = (src / extra).read_bytes()
        index_path = src / "model.safetensors.index.json"
        if tensors is not None:
            if shards and shards > 1:
                tables = split_shards(tensors, shards)
                files["model.safetensors.index.json"] = json.dumps({
                    "metadata": {"total_size": header_sum(tensors)},
                    "weight_map": {n: shard for shard, t in tables.items() for n in t}}).encode()
            else:
                tables = {"model.safetensors": dict(tensors)}
        elif index_path.exists() and with_index:
            index = json.loads(index_path.read_bytes())
            tables = table_from_index(index, config, dtype)
            files["model.safetensors.index.json"] = index_path.read_bytes()
        else:
            tables = {"model.safetensors": synth_table(config, dtype=dtype)}
        for shard, table in tables.items():
            files[shard] = safetensors_file(shard, table)
        if metadata_files:
            files.update({
                "generation_config.json": b'{"do_sample": true}\n',
                "tokenizer_config.json": b'{"model_max_length": 131072}\n',
                "tokenizer.json": b'{"version": "1.0", "model": {}}\n' + b" " * 4096,
                "special_tokens_map.json": b"{}\n",
                "README.md": b"# fake model card\n",
            })
        files.update(extra_files or {})
        for name in drop_files:
            files.pop(name, None)
        return self.add_repo(repo_id, files, **repo_kwargs)

    def accept_token(self, token: str) -> None:
        self.accepted_tokens.add(token)

    def _by_sha(self, sha256: str) -> FakeFile | None:
        for repo in self.repos.values():
            for f in repo.files.values():
                if f.lfs and f.sha256 == sha256:
                    return f
        return None

    # -- faults and log -----------------------------------------------------------------------
    def fault(self, kind: str, match: str = "", *, times: int | None = 1, delay: float = 2.0,
              method: str | None = None) -> Fault:
        assert kind in {"slow", "drop", "500", "503", "truncate", "short", "stall"}, kind
        f = Fault(kind=kind, match=match, times=times, delay=delay, method=method)
        with self._lock:
            self.faults.append(f)
        return f

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.hit(method, path):
                    return f
        return None

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    @property
    def log(self) -> list[Request]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return [Request(**e) for e in self._entries]

    def clear_log(self) -> None:
        with self._lock:
            self._entries.clear()

    def requests(self, method: str | None = None, path_contains: str = "") -> list[Request]:
        return [r for r in self.log if (method is None or r.method == method) and path_contains in r.path]

    def bytes_sent(self, path_contains: str = "") -> int:
        return sum(r.sent for r in self.requests(path_contains=path_contains))

    # -- settings -----------------------------------------------------------------------------
    def settings(self, token: str | None = None, *, offline: bool = False, hf_home: Path | None = None):
        from club3090.settings import Settings

        home = Path(hf_home or os.environ["HF_HOME"])
        return Settings(hf_home=home, endpoint=self.url, token=token, offline=offline)


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    """A started fake Hub on 127.0.0.1 (API) / localhost (CDN); stopped after the test."""
    from huggingface_hub.utils import close_session

    hub = FakeHub().start()
    try:
        yield hub
    finally:
        hub.stop()
        # the client's shared session keeps connections alive; never reuse one across servers
        close_session()
