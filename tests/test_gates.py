"""Pure gate decisions (club3090.gate.*, club3090.rig.hardware) on a small hand-built catalog."""

from __future__ import annotations

from decimal import Decimal
from types import MappingProxyType, SimpleNamespace

import pytest

from club3090.catalog.model import (
    ArchRow,
    Catalog,
    Engine,
    EnginePin,
    Gpu,
    KvFormat,
    Profile,
    ProfileRuntime,
)
from club3090.fit.runtime import RuntimeShape
from club3090.gate import disk, eligibility, engine_support, profile_match
from club3090.gate import terminal as terminals
from club3090.gate.engine_support import EngineInputs as C0Inputs
from club3090.gate.engine_support import EngineState as C0State
from club3090.gate.engine_support import EngineSubReason as C0SubReason
from club3090.gate.flags import BYPASS_EXPERIMENTAL_ARCH as EXP
from club3090.gate.flags import BYPASS_TRUST_REMOTE_CODE as TRC
from club3090.gate.terminal import Terminal
from club3090.model.spec import CONFIDENCES
from club3090.outcome import Reason, Stratum, bypassed
from club3090.rig import hardware
from club3090.rig.gpus import GpuSet

GIB = 2**30


def _engine(eid="vllm-x", etype="vllm", min_sm="7.5", kv=("fp8_e5m2", "fp8_e4m3", "bf16", "nvfp4")):
    return Engine(id=eid, display_name=eid, type=etype, install_method="docker_image", image="img",
                  pin=f"{eid}@v1", vllm_version="0.22.0", min_sm=Decimal(min_sm),
                  supported_kv_formats=tuple(kv), supported_weight_formats=("safetensors",),
                  vendored_overlays=(), required_genesis=False)


def _runtime(genesis=False):
    return ProfileRuntime(genesis_equipped=genesis, genesis_evidence="", service_name="svc", service={},
                          insertion_points=(), top_level={})


def _profile(key="vllm/p", model="m", variant="v", engine="vllm-x", kv="fp8_e5m2", tp=1,
             required_sm=None, fallback_sm=None, runtime=True, genesis=False):
    return Profile(key=key, model=model, weights_variant=variant, workload="fast-chat", engine=engine,
                   drafter=None, kv_format=kv, tp=tp, pp=1, max_model_len=32768, max_num_seqs=1, mem_util=0.9,
                   port=8000, status="production",
                   required_sm=Decimal(required_sm) if required_sm else None,
                   fallback_sm=Decimal(fallback_sm) if fallback_sm else None,
                   requires_nvlink=False, required_engine_features=(), compose_path="x/y.yml",
                   reference_gpu="rtx-3090", runtime=_runtime(genesis) if runtime else None)


def _row(arch="LlamaForCausalLM", trc="false", loads=True, tp=(1, 2, 4), slugs=(), aliases=()):
    return ArchRow(arch=arch, engine_pins=(EnginePin("vllm-x@v1", loads, None if loads else "crashes"),),
                   required_patches=(), tp_divisors=tuple(tp), trust_remote_code=trc,
                   trust_remote_code_evidence=None, kernel_constraints=(), confidence="exact",
                   status="verified", config_architectures=tuple(aliases), model_slugs=tuple(slugs))


def _kv(kid, min_sm=None, max_sm=None):
    return KvFormat(id=kid, min_sm=Decimal(min_sm) if min_sm else None, vllm_arg=kid, engines=("vllm",),
                    max_sm=Decimal(max_sm) if max_sm else None)


RTX3090 = Gpu(id="rtx-3090", display_name="RTX 3090", aliases=("3090",), memory_bytes=24 * GIB,
              sm=Decimal("8.6"), nvlink=True, arch="ampere")


def _catalog(*, profiles=(), engines=None, rows=()):
    engines = engines or (_engine(), _engine("llama-cpp", "llama.cpp"))
    alias = {a: r.arch for r in rows for a in r.config_architectures}
    return Catalog(version="0" * 12, schema_version=1, models={}, engines={e.id: e for e in engines},
                   drafters={}, gpus={"rtx-3090": RTX3090}, profiles={p.key: p for p in profiles},
                   arches={r.arch: r for r in rows}, patches={},
                   kv_formats={k.id: k for k in (_kv("fp8_e5m2"), _kv("fp8_e4m3", "8.6"), _kv("bf16", "8.0"),
                                                  _kv("nvfp4", "10.0", "10.3"))},
                   anchors=(), _arch_alias=MappingProxyType(alias))


def _hw(sm="8.6", mem=(24 * GIB,)):
    return hardware.HardwareFacts(sm=Decimal(sm) if sm else None, sm_source="hardware-flag" if sm else "none",
                               memory_bytes=tuple(mem), memory_source="gpus-flag" if mem else "none")


def _inputs(profile, catalog, *, arch="LlamaForCausalLM", auto_map=False, curated=None, hw=None,
            heads=32, kv_heads=8, weight_format=None):
    return C0Inputs(runtime=RuntimeShape.of(profile), engine=catalog.engines[profile.engine], architecture=arch,
                    auto_map=auto_map, curated_model=curated, hardware=hw or _hw(),
                    num_attention_heads=heads, num_key_value_heads=kv_heads, weight_format=weight_format)


# ----------------------------------------------------------------------------- stratum 2

class TestStratum2:
    def setup_method(self):
        self.cat = _catalog(profiles=(_profile(), _profile("llamacpp/default", engine="llama-cpp"),
                                      _profile("vllm/genesis", genesis=True),
                                      _profile("vllm/turbo", kv="turboquant_3bit_nc"),
                                      _profile("vllm/noruntime", runtime=False)))

    def test_unknown_profile(self):
        stop = profile_match.check_profile("vllm/nope", self.cat, path="B")
        assert (stop.stratum, stop.reason) == (Stratum.PROFILE_LIKE, Reason.UNKNOWN_PROFILE_LIKE)

    @pytest.mark.parametrize("path", ["A", "B"])
    def test_non_vllm_engine_refused_on_both_paths(self, path):
        stop = profile_match.check_profile("llamacpp/default", self.cat, path=path,
                                           curated_model="m", curated_variant="v")
        assert stop.reason is Reason.UNSUPPORTED_RUNTIME_ENGINE

    @pytest.mark.parametrize("key", ["vllm/genesis", "vllm/turbo", "vllm/noruntime"])
    def test_not_emittable_only_on_path_a(self, key):
        stop = profile_match.check_profile(key, self.cat, path="A", curated_model="m", curated_variant="v")
        assert stop.reason is Reason.PROFILE_NOT_EMITTABLE
        assert profile_match.check_profile(key, self.cat, path="B") is None

    @pytest.mark.parametrize("model,variant", [("other", "v"), ("m", "other"), (None, None)])
    def test_mismatch_on_path_a(self, model, variant):
        stop = profile_match.check_profile("vllm/p", self.cat, path="A", curated_model=model,
                                           curated_variant=variant)
        assert stop.reason is Reason.PROFILE_MISMATCH

    def test_match_passes(self):
        assert profile_match.check_profile("vllm/p", self.cat, path="A", curated_model="m",
                                           curated_variant="v") is None


# ----------------------------------------------------------------------------- [C0]

class TestC0:
    def test_exactly_three_states(self):
        assert {"engine-supported", "engine-support-unknown", "needs-trust-remote-code-ack"} == engine_support.ENGINE_STATES
        assert {s.value for s in C0SubReason} == {"no-arch-row", "runtime-incompatible"}

    def test_supported(self):
        p = _profile()
        cat = _catalog(profiles=(p,), rows=(_row(),))
        res = engine_support.engine_support(_inputs(p, cat), cat)
        assert res.state is C0State.ENGINE_SUPPORTED and res.supported
        assert res.need_sm == Decimal("7.5")

    @pytest.mark.parametrize("trc", ["true", "unverified"])
    def test_trc_row_fails_closed(self, trc):
        p = _profile()
        cat = _catalog(profiles=(p,), rows=(_row(trc=trc),))
        res = engine_support.engine_support(_inputs(p, cat), cat)
        assert res.state is C0State.NEEDS_TRC_ACK and res.bypassable_by == {TRC}

    def test_auto_map_known_arch(self):  # g6a
        p = _profile()
        cat = _catalog(profiles=(p,), rows=(_row(),))
        res = engine_support.engine_support(_inputs(p, cat, auto_map=True), cat)
        assert res.state is C0State.NEEDS_TRC_ACK
        assert sorted(res.bypassable_by) == [TRC]
        assert not bypassed(res.stop(), frozenset({EXP}))
        assert bypassed(res.stop(), frozenset({TRC}))

    def test_auto_map_no_row_needs_both(self):  # g6b
        p = _profile()
        cat = _catalog(profiles=(p,))
        res = engine_support.engine_support(_inputs(p, cat, auto_map=True), cat)
        assert res.state is C0State.NEEDS_TRC_ACK and res.bypassable_by == {TRC, EXP}
        assert not bypassed(res.stop(), frozenset({TRC}))
        assert not bypassed(res.stop(), frozenset({EXP}))
        assert bypassed(res.stop(), frozenset({TRC, EXP, "--yes"}))

    def test_no_arch_row(self):
        p = _profile()
        cat = _catalog(profiles=(p,))
        res = engine_support.engine_support(_inputs(p, cat, arch="MysteryForCausalLM"), cat)
        assert (res.state, res.sub_reason) == (C0State.ENGINE_SUPPORT_UNKNOWN, C0SubReason.NO_ARCH_ROW)
        assert res.bypassable_by == {EXP}
        assert res.stop().token == "engine-support-unknown/no-arch-row"

    def test_arch_lookup_order(self):
        p = _profile()
        curated = _row("CuratedArch", slugs=("m",))
        alias = _row("Qwen3NextForCausalLM", aliases=("Qwen3_5ForConditionalGeneration",))
        cat = _catalog(profiles=(p,), rows=(curated, alias))
        assert engine_support.find_arch_row(cat, curated_model="m", architecture="Whatever") is curated
        assert engine_support.find_arch_row(cat, curated_model=None, architecture="Qwen3_5ForConditionalGeneration") is alias
        assert engine_support.find_arch_row(cat, curated_model=None, architecture="Nope") is None

    def test_pin_loads_false(self):  # g10
        p = _profile()
        cat = _catalog(profiles=(p,), rows=(_row(loads=False),))
        res = engine_support.engine_support(_inputs(p, cat), cat)
        assert res.sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE and res.bypassable_by == frozenset()
        assert "crashes" in res.detail
        assert not bypassed(res.stop(), frozenset({EXP, TRC}))

    @pytest.mark.parametrize("tp,heads,kv_heads,ok", [
        (2, 32, 8, True), (4, 32, 8, True), (8, 32, 4, True),      # KV heads replicated (tp % kv == 0)
        (4, 30, 8, False),                                         # heads not divisible
        (4, 32, 6, False),                                         # neither divides
    ])
    def test_tp_geometry(self, tp, heads, kv_heads, ok):
        p = _profile(tp=tp)
        cat = _catalog(profiles=(p,), rows=(_row(tp=(1, 2, 4, 8)),))
        res = engine_support.engine_support(_inputs(p, cat, heads=heads, kv_heads=kv_heads,
                                              hw=_hw(mem=(24 * GIB,) * 8)), cat)
        assert res.supported is ok
        if not ok:
            assert res.sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE

    def test_tp_not_in_divisors(self):
        p = _profile(tp=4)
        cat = _catalog(profiles=(p,), rows=(_row(tp=(1, 2)),))
        res = engine_support.engine_support(_inputs(p, cat, hw=_hw(mem=(24 * GIB,) * 4)), cat)
        assert res.sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE

    def test_kv_not_supported_by_engine(self):
        p = _profile(kv="q4_0")
        cat = _catalog(profiles=(p,), rows=(_row(),))
        assert engine_support.engine_support(_inputs(p, cat), cat).sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE

    def test_gguf_weights(self):
        p = _profile()
        cat = _catalog(profiles=(p,), rows=(_row(),))
        res = engine_support.engine_support(_inputs(p, cat, weight_format="gguf"), cat)
        assert res.sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE

    @pytest.mark.parametrize("sm,ok", [("8.6", False), ("9.0", False), ("10.0", True), ("10.3", True),
                                       ("12.0", False)])
    def test_nvfp4_only_on_sm100_103(self, sm, ok):
        p = _profile(kv="nvfp4")
        cat = _catalog(profiles=(p,), rows=(_row(),))
        assert engine_support.engine_support(_inputs(p, cat, hw=_hw(sm=sm)), cat).supported is ok

    def test_sm_gate_g14(self):
        p = _profile(kv="fp8_e4m3", required_sm="9.0")
        cat = _catalog(profiles=(p,), rows=(_row(),))
        res = engine_support.engine_support(_inputs(p, cat, hw=_hw(sm="8.6")), cat)
        assert res.sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE and res.need_sm == Decimal("9.0")
        assert not bypassed(res.stop(), frozenset({EXP, TRC}))
        assert engine_support.engine_support(_inputs(p, cat, hw=_hw(sm="9.0")), cat).supported

    @pytest.mark.parametrize("kw,need", [({}, "7.5"), ({"kv": "fp8_e4m3"}, "8.6"), ({"required_sm": "9.0"}, "9.0"),
                                         # fallback_sm replaces required_sm when declared
                                         ({"required_sm": "9.0", "fallback_sm": "8.0"}, "8.0"),
                                         ({"kv": "nvfp4"}, "10.0")])
    def test_need_sm_terms(self, kw, need):
        p = _profile(**kw)
        cat = _catalog(profiles=(p,))
        assert engine_support.required_sm(RuntimeShape.of(p), cat) == cat.need_sm(p.key) == Decimal(need)
        assert cat.need_sm(p.key, "nvfp4") == max(Decimal(need), Decimal("10.0"))   # a run's KV format wins

    def test_hardware_undetermined(self):
        p = _profile()
        cat = _catalog(profiles=(p,), rows=(_row(),))
        res = engine_support.engine_support(_inputs(p, cat, hw=_hw(sm=None, mem=())), cat)
        assert res.stop().token == "hardware-sm-undetermined" and res.bypassable_by == frozenset()
        res = engine_support.engine_support(_inputs(p, cat, hw=_hw(sm="8.6", mem=())), cat)
        assert res.stop().token == "hardware-vram-undetermined"

    def test_fewer_gpus_than_tp(self):
        p = _profile(tp=2)
        cat = _catalog(profiles=(p,), rows=(_row(),))
        res = engine_support.engine_support(_inputs(p, cat, hw=_hw(mem=(24 * GIB,))), cat)
        assert res.sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE

    def test_findings_keep_runtime_problem_behind_trc(self):
        """A bypassed trust-remote-code ack never hides a runtime problem behind it."""
        p = _profile()
        cat = _catalog(profiles=(p,), rows=(_row(trc="unverified", loads=False),))
        found = engine_support.engine_findings(_inputs(p, cat), cat)
        assert [f.state for f in found] == [C0State.NEEDS_TRC_ACK, C0State.ENGINE_SUPPORT_UNKNOWN]
        assert found[1].sub_reason is C0SubReason.RUNTIME_INCOMPATIBLE


# ----------------------------------------------------------------------------- hardware sources

def _det(*gpus):
    return SimpleNamespace(gpus=tuple(SimpleNamespace(index=i, name=n, memory_bytes=m, sm=Decimal(s) if s else None,
                                                      vendor=v) for i, (n, m, s, v) in enumerate(gpus)))


class TestResolveHardware:
    def test_nothing(self):
        hw = hardware.resolve_hardware(tp=1)
        assert hw.sm is None and hw.memory_bytes == ()

    def test_hardware_only_prices_reference_card(self):
        hw = hardware.resolve_hardware(tp=2, hardware_sm=Decimal("8.6"), reference_gpu=RTX3090)
        assert hw.memory_bytes == (24 * GIB, 24 * GIB) and hw.memory_source == "reference-gpu"
        assert [n.code for n in hw.notices] == ["reference-gpu-priced"]
        assert hw.notices[0].data == {"gpu": RTX3090.id, "count": 2, "memory_bytes": 24 * GIB}

    def test_detected_min_sm_over_gpus_in_use(self):
        det = _det(("A", 80 * GIB, "9.0", "nvidia"), ("B", 24 * GIB, "8.6", "nvidia"))
        assert hardware.resolve_hardware(tp=1, detected=det).sm == Decimal("9.0")
        assert hardware.resolve_hardware(tp=1, detected=det).notices == ()
        hw = hardware.resolve_hardware(tp=2, detected=det)
        assert hw.sm == Decimal("8.6") and hw.memory_bytes == (80 * GIB, 24 * GIB)
        assert [n.code for n in hw.notices] == ["mixed-gpu-arch"] and hw.notices[0].data["sms"] == ("9.0", "8.6")

    def test_gpus_flag_overrides_detected(self):
        det = _det(("A", 80 * GIB, "9.0", "nvidia"))
        gs = GpuSet(count=2, memory_bytes=(24 * GIB, 24 * GIB), names=("3090", "3090"), sm=Decimal("8.6"),
                    gpu=None, gpus=(None, None))
        hw = hardware.resolve_hardware(tp=1, detected=det, gpu_set=gs)
        assert hw.memory_source == "gpus-flag" and hw.sm == Decimal("8.6") and hw.count == 2

    def test_hardware_flag_wins_for_sm(self):
        gs = GpuSet(count=1, memory_bytes=(24 * GIB,), names=("x",), sm=Decimal("8.6"), gpu=None, gpus=(None,))
        assert hardware.resolve_hardware(tp=1, gpu_set=gs, hardware_sm=Decimal("9.0")).sm == Decimal("9.0")

    def test_non_nvidia_feeds_sm_only(self):
        det = _det(("Radeon", 24 * GIB, None, "amd"))
        hw = hardware.resolve_hardware(tp=1, detected=det)
        assert hw.sm == Decimal("8.0") and hw.sm_source == "probe"
        assert hw.memory_bytes == ()
        assert [n.code for n in hw.notices] == ["non-nvidia-gpu"] and hw.notices[0].data["name"] == "Radeon"


# ----------------------------------------------------------------------------- [C2a]

class TestDisk:
    def test_g7_disk_short(self):
        res = disk.check_disk(footprint_bytes=200 * GIB, free_bytes=2 * GIB)
        assert not res.ok and res.stop().reason is Reason.DISK_SHORT
        assert res.required_bytes == 240 * GIB

    def test_margin_is_exact_integer(self):
        """disk.required_bytes owns the x1.2 margin; the gate applies it."""
        assert disk.check_disk(footprint_bytes=5, free_bytes=6).required_bytes == 6
        assert disk.check_disk(footprint_bytes=10**15 + 1, free_bytes=0).required_bytes == 1_200_000_000_000_002
        assert disk.check_disk(footprint_bytes=100, free_bytes=120).ok
        assert not disk.check_disk(footprint_bytes=100, free_bytes=119).ok

    def test_unknown_free_space_fails_closed(self):
        assert not disk.check_disk(footprint_bytes=1, free_bytes=None).ok
        assert not disk.check_disk(footprint_bytes=None, free_bytes=10**12).ok

    def test_local_folder_passes(self):
        assert disk.check_disk(footprint_bytes=200 * GIB, free_bytes=None, local=True).ok


def test_eligibility():
    assert eligibility.eligibility(None) is None
    stop = eligibility.eligibility("unknown layer type 'rwkv'")
    assert (stop.stratum, stop.reason, stop.bypassable_by) == (Stratum.ELIGIBILITY, Reason.NO_FIT_MODEL, frozenset())


# ----------------------------------------------------------------------------- [C1]

class TestC1:
    def test_table_is_total_with_nine_cells_and_four_terminals(self):
        assert set(terminals.TERMINAL_TABLE) == {(c, v) for c in CONFIDENCES for v in terminals.RAW_VERDICTS}
        assert len(terminals.TERMINAL_TABLE) == 9
        assert {t.value for t in Terminal} == terminals.LOCKED_TERMINALS
        assert {"proceed", "confirm→proceed", "hard-block", "override-accepted"} == terminals.LOCKED_TERMINALS
        assert {cell.terminal.value for cell in terminals.TERMINAL_TABLE.values()} == terminals.LOCKED_TERMINALS

    def test_only_exact_fits_clean_is_silent(self):
        silent = [k for k in terminals.TERMINAL_TABLE if terminals.terminal_for(*k, frozenset()).satisfied]
        assert silent == [("exact", "fits-clean")]

    ALL = frozenset({"--yes", "--force-download", EXP, TRC})

    @pytest.mark.parametrize("conf,verdict,terminal,needs", [
        ("exact", "fits-clean", "proceed", None),
        ("exact", "fits-constrained", "confirm→proceed", "--yes"),
        ("exact", "wont-fit", "hard-block", None),
        ("derived", "fits-clean", "confirm→proceed", "--yes"),
        ("derived", "fits-constrained", "confirm→proceed", "--yes"),
        ("derived", "wont-fit", "override-accepted", "--force-download"),
        ("estimated-lower-bound", "fits-clean", "confirm→proceed", "--yes"),
        ("estimated-lower-bound", "fits-constrained", "confirm→proceed", "--yes"),
        ("estimated-lower-bound", "wont-fit", "override-accepted", "--force-download"),
    ])
    def test_cells(self, conf, verdict, terminal, needs):
        bare = terminals.terminal_for(conf, verdict, frozenset())
        assert bare.terminal.value == terminal
        if terminal == "proceed":
            assert bare.satisfied and bare.reason is None
        elif terminal == "hard-block":
            assert not bare.satisfied and bare.reason == "hard-block"
            assert not terminals.terminal_for(conf, verdict, self.ALL).satisfied      # g3: no flag clears it
        else:
            assert not bare.satisfied and bare.reason == f"{terminal}:needs {needs}"
            assert terminals.terminal_for(conf, verdict, frozenset({needs})).satisfied
            other = ({"--yes", "--force-download"} - {needs})
            assert not terminals.terminal_for(conf, verdict, frozenset(other | {EXP, TRC})).satisfied


def test_unknown_vendor_is_not_nvidia():
    """_is_nvidia fails closed: a GPU of unknown vendor never feeds the fit."""
    det = _det(("Mystery", 24 * GIB, "8.6", None))
    hw = hardware.resolve_hardware(tp=1, detected=det)
    assert hw.memory_bytes == () and hw.sm_source == "probe"


def test_token_enums_have_one_definition():
    from club3090.fit.memory import VERDICTS
    from club3090.model.spec import CONFIDENCES

    assert terminals.RAW_VERDICTS is VERDICTS and CONFIDENCES is CONFIDENCES
    assert {s.value for s in C0State} <= {r.value for r in Reason}
    assert {t.value for t in Terminal} == terminals.LOCKED_TERMINALS
    assert set(terminals.TERMINAL_TABLE) == {(c, v) for c in CONFIDENCES for v in VERDICTS}


def test_stratum2_uses_the_catalog_scope_rule():
    cat = _catalog(profiles=(_profile(), _profile("vllm/turbo", kv="turboquant_k8v4")))
    stop = profile_match.check_profile("vllm/turbo", cat, path="A", curated_model="m", curated_variant="v")
    assert stop.reason is Reason.PROFILE_NOT_EMITTABLE
    assert stop.detail["not_emittable_reason"] == cat.emittable("vllm/turbo")[1] == "genesis-equipped"
