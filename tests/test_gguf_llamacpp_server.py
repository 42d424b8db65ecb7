"""The memory model against a real llama.cpp (llama-cpp-python's bundled build, CPU).

Each case writes a tiny GGUF, creates a llama.cpp context for it in a child process and reads
llama.cpp's own start-up lines: the KV cache size per cache (and its K and V halves), the cell
counts, the model buffer and the compute buffer. The KV figures must equal the prediction to the
hundredth of a MiB llama.cpp prints; the compute buffer, which the model estimates, must stay
within its stated band. On a CPU build the KV lives on the host, with the same sizes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from club3090.fit.llamacpp import LlamaCppArgs, predict
from club3090.model.gguf import parse_header
from club3090.model.gguf_model import from_files
from tests.gguf_fixtures import Q, Spec, write

COMPUTE_BAND = 0.15   # the compute buffer is an estimate; see docs/ACCURACY.md
# The rule is fitted on real model widths (n_embd >= 2048, docs/ACCURACY.md); on these 256-wide
# models the small tensors it leaves out weigh a few MiB of a 3-10 MiB buffer.
COMPUTE_SLACK_MIB = 3.5

PROBE = """
import json, sys
import llama_cpp as L
a = json.loads(sys.argv[1])
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = 0
m = L.llama_model_load_from_file(a["path"].encode(), mp)
assert m, "model did not load"
cp = L.llama_context_default_params()
for k, v in a["ctx"].items():
    setattr(cp, k, v)
c = L.llama_init_from_model(m, cp)
assert c, "context was not created"
L.llama_free(c)
L.llama_model_free(m)
"""

KV_RE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
                   r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB")
COMPUTE_RE = re.compile(r"CPU compute buffer size = +([\d.]+) MiB")
MODEL_RE = re.compile(r"(CPU\w*) model buffer size = +([\d.]+) MiB")
GGML_TYPE_IDS = {"f16": 1, "q8_0": 8, "q4_0": 2, "q5_1": 7}


@dataclass(frozen=True)
class Case:
    name: str
    spec: Spec
    args: LlamaCppArgs


CASES = [
    Case("llama-f16-pad", Spec(), LlamaCppArgs(ctx_size=100, flash_attn=False)),
    Case("llama-f16-4k", Spec(), LlamaCppArgs(ctx_size=4096, flash_attn=False)),
    Case("llama-q8-fa", Spec(weight_type=Q.Q8_0), LlamaCppArgs(ctx_size=1000, cache_type_k="q8_0",
                                                               cache_type_v="q8_0")),
    Case("llama-q4k-q8v", Spec(weight_type=Q.Q4_K, n_embd=512, n_head=8, n_head_kv=4),
         LlamaCppArgs(ctx_size=3000, cache_type_k="q4_0", cache_type_v="q8_0", ubatch_size=256)),
    Case("llama-q8k-nofa", Spec(), LlamaCppArgs(ctx_size=2048, cache_type_k="q8_0", flash_attn=False)),
    Case("llama-3-streams", Spec(), LlamaCppArgs(ctx_size=1000, parallel=3, kv_unified=False)),
    Case("moe-q4k", Spec(n_expert=4, n_expert_used=2, weight_type=Q.Q4_K),
         LlamaCppArgs(ctx_size=2048, cache_type_k="q8_0", cache_type_v="q8_0")),
    Case("gemma3-swa", Spec(arch="gemma3", n_layer=7, head_dim=64, sliding_window=128, output=False),
         LlamaCppArgs(ctx_size=4096)),
    Case("gemma3-swa-2-slots", Spec(arch="gemma3", n_layer=7, head_dim=64, sliding_window=128, output=False),
         LlamaCppArgs(ctx_size=8192, parallel=2, ubatch_size=128, cache_type_k="q8_0", cache_type_v="q8_0")),
    Case("gemma3-swa-full", Spec(arch="gemma3", n_layer=7, head_dim=64, sliding_window=128, output=False),
         LlamaCppArgs(ctx_size=2048, swa_full=True, parallel=2, kv_unified=False)),
]


def _context_params(args: LlamaCppArgs) -> dict[str, object]:
    return {"n_ctx": args.ctx_size, "n_batch": args.batch_size, "n_ubatch": args.ubatch_size,
            "n_seq_max": args.parallel, "kv_unified": args.kv_unified, "swa_full": args.swa_full,
            "type_k": GGML_TYPE_IDS[args.cache_type_k], "type_v": GGML_TYPE_IDS[args.cache_type_v],
            "flash_attn_type": 1 if args.flash_attn else 0}


def _start(path: Path, args: LlamaCppArgs) -> str:
    run = subprocess.run([sys.executable, "-c", PROBE, json.dumps({"path": str(path), "ctx": _context_params(args)})],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stderr


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_predicted_kv_equals_llamacpp_startup(tmp_path: Path, case: Case) -> None:
    (path,) = write(tmp_path, case.name, case.spec)
    model = from_files([parse_header(path.read_bytes(), file=path.name)])
    got = predict(model, case.args, gpu_bytes=[])
    log = _start(path, case.args)

    printed = KV_RE.findall(log)
    kv = got.kv
    expected = []
    if kv.layers:
        expected.append((kv.cells, kv.layers, kv.k_bytes, kv.v_bytes))
    if kv.swa_layers:
        expected.append((kv.swa_cells, kv.swa_layers, kv.swa_k_bytes, kv.swa_v_bytes))
    assert len(printed) == len(expected), log[-3000:]
    for (size, cells, layers, _, streams, tk, k_mib, tv, v_mib), (e_cells, e_layers, k, v) in zip(
            printed, expected, strict=True):
        assert (int(cells), int(layers), int(streams)) == (e_cells, e_layers, kv.streams)
        assert (tk, tv) == (case.args.cache_type_k, case.args.cache_type_v)
        assert (k_mib, v_mib, size) == (_mib(k), _mib(v), _mib(k + v))

    # the CPU backend repacks some K-quant matrices into an extra CPU_REPACK buffer (a CPU-only copy)
    buffers = dict(MODEL_RE.findall(log))
    weights = got.host.weights_bytes / (1 << 20)
    if "CPU_REPACK" in buffers:
        assert float(buffers["CPU_Mapped"]) <= weights <= float(buffers["CPU_Mapped"]) + float(buffers["CPU_REPACK"])
    else:
        assert list(buffers.values()) == [_mib(got.host.weights_bytes)]
    compute = float(COMPUTE_RE.findall(log)[-1])
    predicted = got.host.compute_bytes / (1 << 20)
    assert abs(predicted - compute) <= COMPUTE_BAND * compute + COMPUTE_SLACK_MIB, (predicted, compute)
