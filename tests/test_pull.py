"""Orchestration of the pull gate (club3090.pipeline.pull.evaluate) with injected stand-ins."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from club3090.catalog import load_catalog
from club3090.cli.exit_codes import exit_code
from club3090.compose.generate import ComposeOutcome
from club3090.edges.gpu_probe import DetectedGpu, DetectedGpus
from club3090.errors import HubUnreachable, UsageError
from club3090.gate.flags import BYPASS_EXPERIMENTAL_ARCH, BYPASS_TRUST_REMOTE_CODE
from club3090.gate.terminal import RAW_VERDICTS
from club3090.model.architecture import parse_config
from club3090.model.spec import ModelSpec
from club3090.outcome import Outcome, Reason, Stop, Stratum
from club3090.pipeline.pull import CAVEAT, PullRequest, evaluate, select_path
from club3090.pipeline.pull_gate import Gate, Verdict
from club3090.settings import Settings
from tests.fixtures_path import fixture_path
from tests.providers import offline_rig, rig

GIB = 2**30
CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"
NO_GPU = DetectedGpus((), "none")

DENSE = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
         "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
         "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _spec(config: dict[str, Any], *, weights: int = 15 * GIB, source: str = "hub", ref: str = "org/model") -> ModelSpec:
    arch = parse_config(config)
    return ModelSpec(source=source, ref=ref, revision=None, commit=None, arch=arch, weights_bytes=weights,
                     dtype_bytes=MappingProxyType({}), weight_files=(), download_files=(), footprint_bytes=weights,
                     quantization=None, compute_dtype="bfloat16", requires_trust_remote_code=arch.auto_map,
                     has_mtp_head=False, has_vision=False, confidence="estimated-lower-bound",
                     max_ctx_supported=arch.max_position_embeddings)


def _run(catalog, request: PullRequest, *, spec: Any = None, free: int | None = 10**15, detect=None,
         dry_run=None, captures: Path | None = None, settings: Settings | None = None):
    provider = offline_rig(settings, facts=spec, free=free, detected=detect() if detect else NO_GPU)
    compose = (lambda key, cat, _out: dry_run(key, cat)) if dry_run is not None else None
    return evaluate(request, provider, catalog=catalog, compose=compose, captures_root=captures)


# ----------------------------------------------------------------------------- small pure parts

def test_path_selection():
    req = PullRequest("x", "vllm/minimal")
    assert select_path(req, curated=True) == "B"
    assert select_path(PullRequest("x", "p", out=Path("o")), curated=True) == "A"
    assert select_path(PullRequest("x", "p", out=Path("o")), curated=False) == "B"
    assert select_path(PullRequest("x", "p", out=Path("o"), dry_run=True), curated=True) == "B"
    assert select_path(PullRequest("x", "p", dry_run=True, path="A"), curated=False) == "A"


def test_exit_codes():
    def outcome(ok: bool, reason: str | None) -> Outcome:
        return Verdict(Gate(PullRequest("x", "p"), "x"), Stratum.DECIDED, ok, reason).outcome

    assert outcome(True, None) is Outcome.OK
    assert outcome(False, "confirm→proceed:needs --yes") is Outcome.NEEDS_ACK
    assert outcome(False, "override-accepted:needs --force-download") is Outcome.NEEDS_ACK
    assert outcome(False, "hard-block") is Outcome.REFUSED
    assert outcome(False, "disk-short") is Outcome.REFUSED
    from club3090.cli.exit_codes import exit_code
    assert [exit_code(o) for o in (Outcome.OK, Outcome.REFUSED, Outcome.NEEDS_ACK)] == [0, 2, 3]


# ----------------------------------------------------------------------------- stacked failures

class TestEarliestStratumWins:
    def test_stratum1_beats_everything(self, catalog):
        stop = Stop(Stratum.DERIVER, Reason.REPO_NOT_FOUND, detail={"message": "gone"})
        r = _run(catalog, PullRequest("org/x", "llamacpp/default"), spec=stop, free=0)
        assert (r.stratum, r.reason, exit_code(r.outcome), r.fit, r.c0) == (Stratum.DERIVER, "repo-not-found", 2, None, None)

    def test_stratum2_beats_c0_disk_and_fit(self, catalog):
        # llama.cpp profile + no GPU + no disk + curated too big: stratum 2 wins
        r = _run(catalog, PullRequest(CURATED, "llamacpp/default", out=Path("o")), free=0)
        assert (r.stratum, r.reason, r.c0, r.raw_verdict) == (Stratum.PROFILE_LIKE, "unsupported-runtime-engine",
                                                               None, None)

    def test_c0_beats_disk_and_eligibility(self, catalog):
        config = {**DENSE, "architectures": ["MysteryForCausalLM"], "layer_types": ["rwkv"] * 28}
        r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090")), spec=_spec(config), free=0)
        assert (r.stratum, r.reason) == (Stratum.ENGINE_SUPPORT, "engine-support-unknown/no-arch-row")

    def test_disk_beats_eligibility_after_a_bypass(self, catalog):
        config = {**DENSE, "architectures": ["MysteryForCausalLM"], "layer_types": ["rwkv"] * 28}
        r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), experimental_arch=True, yes=True),
                 spec=_spec(config), free=GIB)
        assert (r.stratum, r.reason, r.fit) == (Stratum.DISK, "disk-short", None)
        assert "bypassed" in r.notice_codes
        assert r.bypassed == [{"token": "engine-support-unknown/no-arch-row", "flags": ["--experimental-arch"]}]

    def test_a_disk_stop_after_a_bypass_does_not_offer_the_bypass_again(self, catalog):
        from club3090.cli.commands.pull import headline

        config = {**DENSE, "auto_map": {"AutoModel": "x.Y"}}
        r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), trust_remote_code=True, yes=True),
                 spec=_spec(config), free=GIB)
        assert (r.stratum, r.reason) == (Stratum.DISK, "disk-short")
        assert "--trust-remote-code" not in headline(r)
        stopped = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090")), spec=_spec(config), free=GIB)
        assert stopped.reason == "needs-trust-remote-code-ack"
        assert headline(stopped).endswith("re-run with --trust-remote-code to go ahead anyway")

    def test_a_launch_that_downloads_elsewhere_skips_the_local_disk(self, catalog):
        request = PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), yes=True, downloads_here=False)
        r = _run(catalog, request, spec=_spec(DENSE), free=GIB)
        assert r.stratum != Stratum.DISK and r.fit is not None

    def test_eligibility_beats_fit(self, catalog):
        config = {**DENSE, "layer_types": ["rwkv"] * 28}
        r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), force_download=True, yes=True),
                 spec=_spec(config))
        assert (r.stratum, r.reason, r.fit, r.raw_verdict) == (Stratum.ELIGIBILITY, "no-fit-model", None, None)

    def test_bypassed_trc_does_not_hide_a_runtime_problem(self, catalog):
        # auto_map on a known arch (ack given) + a profile whose pin does not load Qwen2
        config = {**DENSE, "auto_map": {"AutoModel": "x.Y"}}
        r = _run(catalog, PullRequest("org/x", "vllm/tools-text", gpus=rig("1x3090"), trust_remote_code=True, yes=True),
                 spec=_spec(config))
        assert r.reason == "engine-support-unknown/runtime-incompatible"
        assert r.bypassed == [{"token": "needs-trust-remote-code-ack", "flags": ["--trust-remote-code"]}]


# ----------------------------------------------------------------------------- bypass subset rule

@pytest.mark.parametrize("flags,cleared", [
    ({}, False),
    ({"trust_remote_code": True}, False),
    ({"experimental_arch": True}, False),
    ({"trust_remote_code": True, "experimental_arch": True}, True),
])
def test_subset_rule_no_row_plus_auto_map(catalog, flags, cleared):
    config = {**DENSE, "architectures": ["MysteryForCausalLM"], "auto_map": {"AutoModel": "x.Y"}}
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), yes=True, **flags), spec=_spec(config))
    if cleared:
        assert r.stratum != Stratum.ENGINE_SUPPORT and r.ok and r.caveat == CAVEAT
    else:
        assert r.reason == "needs-trust-remote-code-ack"
        assert r.c0.bypassable_by == {BYPASS_TRUST_REMOTE_CODE, BYPASS_EXPERIMENTAL_ARCH}


def test_experimental_arch_is_path_b_only(catalog, tmp_path):
    config = {**DENSE, "architectures": ["MysteryForCausalLM"]}
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), experimental_arch=True, yes=True,
                                  path="A", out=tmp_path / "o.yml"), spec=_spec(config))
    # an explicit Path A with a non-curated spec stops at stratum 2 before [C0] could be bypassed
    assert r.stratum == Stratum.PROFILE_LIKE and r.reason == "profile-mismatch"


# ----------------------------------------------------------------------------- hardware

class TestHardware:
    def test_no_source_fails_closed(self, catalog):
        r = _run(catalog, PullRequest(CURATED, "vllm/minimal"))
        assert (r.stratum, r.reason, r.fit) == (Stratum.ENGINE_SUPPORT, "hardware-sm-undetermined", None)

    def test_size_only_gpus_needs_an_sm(self, catalog):
        r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x24GiB")))
        assert r.reason == "hardware-sm-undetermined"
        r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x24GiB"), hardware_sm=Decimal("8.6")))
        assert r.ok

    def test_hardware_only_prices_the_reference_card_with_a_notice(self, catalog):
        r = _run(catalog, PullRequest(CURATED, "vllm/minimal", hardware_sm=Decimal("8.6")))
        assert r.ok and r.hardware.memory_source == "reference-gpu"
        notice = next(n for n in r.notices if n.code == "reference-gpu-priced")
        assert notice.data["gpu"] == "rtx-3090" and notice.data["count"] == 1
        assert notice.data["memory_bytes"] == r.hardware.memory_bytes[0]

    def test_detected_gpus_feed_the_fit(self, catalog):
        det = DetectedGpus((DetectedGpu(0, "NVIDIA H100 80GB HBM3", 80 * GIB, Decimal("9.0"), "nvidia"),), "nvml")
        r = _run(catalog, PullRequest(CURATED, "vllm/minimal"), detect=lambda: det)
        assert r.ok and r.hardware.memory_bytes == (80 * GIB,) and r.hardware.sm == Decimal("9.0")
        assert r.fit.per_gpu.gpu_memory_bytes == 80 * GIB

    def test_non_nvidia_never_feeds_the_fit(self):
        # a non-NVIDIA card is assumed SM 8.0: the seed-era vllm/minimal (SM 7.5) passes the SM gate,
        # so only the memory rule can stop it (the synced one needs 8.6 for fp8_e4m3 KV)
        seed = load_catalog(fixture_path("catalog_seed"))
        det = DetectedGpus((DetectedGpu(0, "AMD Radeon", 24 * GIB, Decimal("8.0"), "amd"),), "amd-smi")
        r = _run(seed, PullRequest(CURATED, "vllm/minimal"), detect=lambda: det)
        assert r.reason == "hardware-vram-undetermined"

    def test_fewer_gpus_than_tp(self, catalog):
        r = _run(catalog, PullRequest(CURATED, "vllm/dual", gpus=rig("1x3090")))
        assert r.reason == "engine-support-unknown/runtime-incompatible"

    def test_real_memory_changes_the_verdict(self, catalog):
        """W1: the fit prices the declared cards, not a fixed 24 GB."""
        small = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x16GiB"), hardware_sm=Decimal("8.6")))
        big = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1xH100-80GB")))
        assert small.raw_verdict == "wont-fit" and big.raw_verdict == "fits-clean"
        assert big.fit.kv_cache_tokens > 0

    def test_tp4_on_four_gpus(self, catalog):
        """W2: a TP-4 profile is priced (no crash) on four declared GPUs."""
        r = _run(catalog, PullRequest(CURATED, "vllm/qwen-27b-multi-fast", gpus=rig("4x3090")))
        assert r.stratum == Stratum.DECIDED and r.fit is not None and len(r.fit.ranks) == 4


# ----------------------------------------------------------------------------- verdicts

def test_wont_fit_suggests_the_closest_fit(catalog):
    # two 13 GiB cards: the weights fit, the full 262K context does not, a shorter one does
    r = _run(catalog, PullRequest(CURATED, "vllm/dual", gpus=rig("2x13GiB"), hardware_sm=Decimal("8.6")))
    assert r.reason == "hard-block"
    assert any("largest context that fits" in s for s in r.suggestions)
    assert any("tp=4" in s for s in r.suggestions)


def test_low_confidence_wont_fit_needs_force_download(catalog):
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090")), spec=_spec(DENSE, weights=40 * GIB))
    assert (r.raw_verdict, r.reason, exit_code(r.outcome)) == ("wont-fit", "override-accepted:needs --force-download", 3)
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), force_download=True),
             spec=_spec(DENSE, weights=40 * GIB))
    assert (r.ok, r.terminal, exit_code(r.outcome), r.caveat) == (True, "override-accepted", 0, CAVEAT)
    assert "override-accepted" in r.notice_codes


def test_a_dry_run_answers_the_fit_first_and_a_no_fit_exits_2_as_fits_does(catalog):
    no_fit = _spec(DENSE, weights=40 * GIB)
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), dry_run=True), spec=no_fit)
    assert (r.raw_verdict, exit_code(r.outcome), r.to_json()["ok"]) == ("wont-fit", 2, False)
    # no disk either: the fit is the answer a dry run gives first (the disk is checked after it)
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), dry_run=True), spec=no_fit, free=0)
    assert (r.raw_verdict, r.summary, exit_code(r.outcome)) == ("wont-fit", "DOES NOT FIT", 2)
    fits = _spec(DENSE)
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), dry_run=True), spec=fits)
    assert (exit_code(r.outcome), r.to_json()["ok"], r.to_json()["outcome"]) == (0, True, "ok")
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), dry_run=True), spec=fits, free=0)
    assert r.raw_verdict in ("fits-clean", "fits-constrained") and r.to_json()["ok"] is False
    assert int(r.stratum) == 4 and exit_code(r.outcome) == 2


def test_path_b_clamps_context_to_the_model(catalog):
    config = {**DENSE, "max_position_embeddings": 4096}
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), yes=True), spec=_spec(config))
    assert r.fit.max_model_len == 4096
    notice = next(n for n in r.notices if n.code == "context-capped-to-model")
    assert notice.data["model_max"] == 4096 and notice.data["max_model_len"] > 4096


def test_local_folder_skips_the_disk_gate(catalog):
    r = _run(catalog, PullRequest("./m", "vllm/minimal", gpus=rig("1x3090"), yes=True),
             spec=_spec(DENSE, source="local", ref="./m"), free=None)
    assert r.ok


def test_unknown_free_space_is_disk_short(catalog):
    r = _run(catalog, PullRequest("org/x", "vllm/minimal", gpus=rig("1x3090"), yes=True), spec=_spec(DENSE), free=None)
    assert r.reason == "disk-short"


def test_hub_outage_is_not_a_verdict(catalog):
    with pytest.raises(HubUnreachable):
        evaluate(PullRequest("org/x", "vllm/minimal"), offline_rig(facts=HubUnreachable("org/x", "down")),
                 catalog=catalog)


# ----------------------------------------------------------------------------- Path A

def test_path_a_writes_atomically_and_refuses_to_clobber(catalog, tmp_path):
    out = tmp_path / "c.yml"
    r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090"), out=out))
    assert r.ok and r.emitted and out.read_text() == r.compose_text and "services:" in r.compose_text
    out.write_text("mine")
    with pytest.raises(UsageError):
        _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090"), out=out))
    assert out.read_text() == "mine"
    r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090"), out=out, force=True))
    assert r.ok and out.read_text() != "mine"


@pytest.mark.parametrize("token", ["pin-mismatch", "tp-or-kv", "trc", "foundational-drift", "degraded-drift", "scope",
                                   "other"])
def test_every_dry_run_refusal_is_a_stratum6_stop(catalog, tmp_path, token):
    out = tmp_path / "c.yml"
    refuse = lambda key, cat: ComposeOutcome(ok=False, outcome=Outcome.REFUSED, profile=key, refusal=token)  # noqa: E731
    r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090"), out=out), dry_run=refuse)
    assert (r.stratum, r.reason, r.ok, exit_code(r.outcome)) == (Stratum.COMPOSE_DRY_RUN, f"d-refused:{token}", False, 2)
    assert not out.exists() and r.caveat is None


def test_constrained_path_a_notice_and_fitted_override(catalog, tmp_path):
    r = _run(catalog, PullRequest(CURATED, "vllm/dual", gpus=rig("2x18GiB"), hardware_sm=Decimal("8.6"), yes=True,
                                  out=tmp_path / "c.yml"))
    assert r.ok and r.raw_verdict == "fits-constrained"
    assert r.notice_codes[:2] == ("effective-cap", "rig-fitted-override")
    cap, fitted = r.notices[:2]
    assert cap.data["rewritten"] == () and cap.data["profile"] == "vllm/dual"
    assert fitted.data["max_model_len"] == r.fit.max_model_len_fit > 0
    # no compose value rewritten: the file is the generator's own output for the profile
    from club3090.compose.generate import generate
    assert r.compose_text == generate("vllm/dual", catalog, out_name=str(tmp_path / "c.yml")).text


# ----------------------------------------------------------------------------- capture bundles

def test_hard_stops_write_a_redacted_bundle(catalog, tmp_path):
    captures = tmp_path / ".pull-captures"
    r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x16GiB"), hardware_sm=Decimal("8.6")),
             captures=captures)
    assert r.reason == "hard-block" and r.bundle is not None
    gate = json.loads((r.bundle / "pt1-gate.json").read_text())
    manifest = json.loads((r.bundle / "manifest.json").read_text())
    assert gate["abort_reason"] == "hard-block" and gate["raw_verdict"] == "wont-fit"
    assert gate["predicted_b_breakdown"]["per_gpu"]["weights_bytes"] > 0
    assert manifest["outcome"] == "hard-block" and manifest["topology_class"] == "1x16384MiB"
    assert manifest["engine_pin"] == catalog.engines[catalog.profiles["vllm/minimal"].engine].pin
    assert manifest["submission_fingerprint"]
    assert (captures / ".last").read_text().strip() == r.bundle.relative_to(captures).as_posix()


def test_no_bundle_for_needs_flag_or_ok(catalog, tmp_path):
    captures = tmp_path / ".pull-captures"
    r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090")), captures=captures)
    assert r.ok and r.bundle is None and not captures.exists()


def test_early_stop_bundle_leaves_post_c0_fields_null(catalog, tmp_path):
    captures = tmp_path / ".pull-captures"
    r = _run(catalog, PullRequest(CURATED, "vllm/dual-turbo", out=tmp_path / "o"), captures=captures)
    manifest = json.loads((r.bundle / "manifest.json").read_text())
    assert manifest["engine_pin"] is None and manifest["topology_class"] is None
    # the fit engine's version is known whatever stopped the gate (the Loop's dedup key needs it)
    assert manifest["kv_calc_version"].startswith("club3090-memory+")


# ----------------------------------------------------------------------------- the acceptance: MoE / hybrid

@pytest.mark.parametrize("fixture,profile,gpus", [
    ("Qwen--Qwen3-30B-A3B", "vllm/dual", "2x3090"),                 # MoE
    ("Qwen--Qwen3.5-35B-A3B", "vllm/qwen-35b-a3b-dual", "2x3090"),   # hybrid linear attention + MoE
    ("mistralai--Mixtral-8x7B-Instruct-v0.1", "vllm/dual", "2xH100-80GB"),
])
def test_non_curated_moe_and_hybrid_get_a_real_verdict(fake_hub, catalog, fixture, profile, gpus):
    fake_hub.add_fixture(fixture)
    repo = fixture.replace("--", "/", 1)
    r = evaluate(PullRequest(repo, profile, gpus=rig(gpus)), offline_rig(fake_hub.settings()), catalog=catalog)
    assert r.stratum == Stratum.DECIDED, (r.reason, r.detail)
    assert r.reason != "no-fit-model" and r.confidence == "estimated-lower-bound"
    assert r.raw_verdict in RAW_VERDICTS and r.fit is not None
    assert r.fit.per_gpu.weights_bytes > 0 and r.fit.per_gpu.budget_bytes > 0
    assert r.reason == "confirm→proceed:needs --yes" or r.reason == "override-accepted:needs --force-download"
    assert r.caveat is None


def test_to_json_shape(catalog):
    r = _run(catalog, PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090")))
    data = json.loads(json.dumps(r.to_json()))
    for key in ("ok", "outcome", "path", "stratum", "stratum_name", "reason", "c0", "confidence", "raw_verdict",
                "terminal", "fit", "out", "notices", "notice_codes", "bypassed", "caveat"):
        assert key in data
    assert len(data["notice_codes"]) == len(data["notices"]) and data["bypassed"] == []
    assert data["stratum"] == 0 and data["stratum_name"] == "DECIDED"
    assert data["c0"] == {"state": "engine-supported", "sub_reason": None, "bypassable_by": []}


# ----------------------------------------------------------------------------- non-curated Path B with --out

def test_derived_compose_written_for_a_satisfied_non_curated_verdict(fake_hub, catalog, tmp_path):
    fake_hub.add_fixture("Qwen--Qwen2.5-7B")
    out = tmp_path / "derived.yml"
    r = evaluate(PullRequest("Qwen/Qwen2.5-7B", "vllm/minimal", gpus=rig("1x3090"), yes=True, out=out),
                 offline_rig(fake_hub.settings(hf_home=tmp_path / "hf")), catalog=catalog)
    assert r.ok and r.path == "B" and r.emitted and r.out == out
    text = out.read_text()
    assert f"image: {catalog.engines['vllm-stable'].image}" in text and "--trust-remote-code" not in text
    assert "emit-only" in r.notice_codes and "no-download-yet" not in r.notice_codes


def test_derived_refusal_is_a_notice_not_a_verdict(fake_hub, catalog, tmp_path):
    fake_hub.add_fixture("Qwen--Qwen2.5-7B")
    out = tmp_path / "derived.yml"
    r = evaluate(PullRequest("Qwen/Qwen2.5-7B", "vllm/dual", gpus=rig("2x3090"), yes=True, out=out),
                 offline_rig(fake_hub.settings(hf_home=tmp_path / "hf")), catalog=catalog)
    assert r.ok and exit_code(r.outcome) == 0 and not out.exists() and not r.emitted
    refused = [n for n in r.notices if n.code == "emit-refused"]
    assert [n.data["failure"] for n in refused] == ["derived-runtime-unsupported:drafter"]
    assert "emit-only" not in r.notice_codes


def test_the_automatic_shape_is_the_runtime_it_priced_not_a_catalog_profile(catalog, tmp_path):
    """No --profile-like on a non-curated repo: the gate's runtime is the derived shape it priced,
    the catalog is left as it was, and `up` reads the same value (``PullResult.runtime``)."""
    keys = set(catalog.profiles)
    r = _run(catalog, PullRequest("org/x", None, gpus=rig("2x3090"), yes=True, dry_run=True), spec=_spec(DENSE))
    assert r.shape_source == "derived" and r.runtime is not None and r.choice is not None
    picked = r.choice.chosen or r.choice.best
    assert (r.runtime.key, r.runtime.tp, r.runtime.kv_format, r.runtime.max_model_len) == \
        ("auto", picked.shape.tp, picked.shape.kv_cache_dtype, r.fit.max_model_len)
    assert r.runtime.profile_sm is None and r.runtime.drafter is None and set(catalog.profiles) == keys


def test_a_derived_shape_on_path_a_names_the_flag_that_writes_a_curated_compose(catalog, tmp_path):
    r = _run(catalog, PullRequest(CURATED, None, gpus=rig("1xH100-80GB"), yes=True, out=tmp_path / "o.yml"))
    assert (r.path, r.shape_source, r.reason) == ("A", "derived", "d-refused:scope")
    assert "--profile-like" in r.detail and not (tmp_path / "o.yml").exists()
