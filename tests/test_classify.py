"""The Loop's classifier on real vLLM / Docker error texts (tests/fixtures/logs, sources in SOURCE.md)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from club3090.edges import boot as boot_edge
from club3090.errors import InputError
from club3090.reports.classify import (
    FAILURE_CLASSES,
    ROUTE_FILE,
    ROUTE_LOCAL,
    ROUTE_REVIEW,
    ROUTE_SUPPRESSED,
    FingerprintTable,
    classify_points,
    coerce_class,
    error_fingerprint,
    error_lines,
)
from club3090.reports.fingerprints import SHIPPED, load_table
from tests.fixtures_path import fixture_path

TABLE = load_table()
ARCH, ENGINE = "Qwen2ForCausalLM", "0.10.1"


def log(name: str) -> str:
    return fixture_path("logs", name).read_text(encoding="utf-8")


def boot_failed(excerpt: str, failure: str = "boot-timeout", actual=None) -> dict:
    return {"boot": {"ok": False, "seconds": 600.0, "failure": failure, "detail": "",
                     "failure_log_excerpt": excerpt,
                     "actual": actual or {"attempted_alloc_mib": None, "gpu_worker_reported_mib": None}}}


def classify(points, *, table=TABLE, gate_only=False):
    return classify_points(points, arch_family=ARCH, engine_version=ENGINE, gate_only=gate_only, table=table)


def test_the_enum_has_exactly_six_values_and_coerces_the_rest():
    assert FAILURE_CLASSES == ("genuine-oom", "overlay-arch-drift", "kernel-unsupported", "quant-unsupported",
                               "benign-cold-start", "unknown")
    assert coerce_class("genuine-oom") == "genuine-oom"
    for odd in ("oom", "Genuine-OOM", None, 3, "environment"):
        assert coerce_class(odd) == "unknown"


def test_the_shipped_table_uses_only_the_six_classes_and_covers_rows_1_to_9():
    assert {m.failure_class for m in TABLE.matchers} <= set(FAILURE_CLASSES)
    assert {m.row for m in TABLE.matchers} == set(range(1, 10))
    assert TABLE.exact == {}                       # seeded empty, grown by maintainers


@pytest.mark.parametrize("name, expected_line", [
    ("oom_profile_run.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"),
    ("oom_v1_wrapped.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB"),
    ("oom_cudagraph_capture.log", "RuntimeError: CUDA error: out of memory"),
    ("oom_cudagraph_capture_torch.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB"),
    ("kv_too_small_v0.log", "ValueError: The model's max seq len (32768) is larger than the maximum number"),
    ("kv_too_small_v1.log", "ValueError: To serve at least one request with the models's max seq len (32768)"),
])
def test_tier1_oom_fast_path_on_real_logs(name, expected_line):
    got = classify(boot_failed(log(name)))
    assert got.failure_class == "genuine-oom" and got.tier == "tier1-oom" and got.route == ROUTE_FILE
    assert got.error_text.startswith(expected_line), got.error_text
    assert got.error_source == "pt3.failure_log_excerpt" and len(got.error_text) <= 240
    assert got.route_as_kv_calc_bug is False        # no evidence in these bundles
    assert got.fingerprint == error_fingerprint(got.error_text, ARCH, ENGINE)


def test_generic_wrappers_and_info_lines_are_not_the_error():
    lines = error_lines(log("oom_v1_wrapped.log"))
    assert not any("Engine core initialization failed" in ln for ln in lines)
    # the cudagraph INFO line says "out-of-memory error occurs" but is not an error line
    assert not any("Capturing cudagraphs" in ln for ln in error_lines(log("oom_cudagraph_capture_torch.log")))


@pytest.mark.parametrize("name, cls, rule", [
    ("no_kernel_image.log", "kernel-unsupported", "kernel-unsupported-sm"),
    ("unknown_architecture.log", "kernel-unsupported", "engine-arch-unknown"),
    ("quant_not_supported.log", "quant-unsupported", "quant-method-unsupported"),
    ("quant_config_missing.log", "quant-unsupported", "quant-weightload-dtype"),
    ("undefined_symbol.log", "overlay-arch-drift", "overlay-arch-drift-missing-symbol"),
])
def test_appendix_a_log_matchers_on_real_errors(name, cls, rule):
    got = classify(boot_failed(log(name)))
    assert (got.failure_class, got.tier, got.rule) == (cls, "matcher", rule)
    assert got.route == ROUTE_FILE


def smoke(results: dict, errors: dict | None = None) -> dict:
    detail = {cap: {"status": st, "error": (errors or {}).get(cap)} for cap, st in results.items()}
    return {"smoke_capability_set": list(results), "results": results, "partial": False, "results_detail": detail}


def test_row1_cold_start_then_green_is_suppressed():
    points = boot_failed("INFO 05-01 model loading", failure="boot-timeout")
    points["smoke"] = smoke({"plain-chat": "green", "streaming": "green"})
    got = classify(points)
    assert (got.failure_class, got.rule, got.route) == ("benign-cold-start", "cold-start-then-green", ROUTE_SUPPRESSED)


def test_row2_served_model_name_404_is_suppressed():
    error = json.loads(fixture_path("logs", "smoke_404.json").read_text())["error"]
    points = {"boot": {"ok": True, "seconds": 40.0, "failure": None, "detail": ""},
              "smoke": smoke({"plain-chat": "red", "streaming": "red"}, {"plain-chat": error, "streaming": error})}
    got = classify(points)
    assert (got.failure_class, got.rule, got.route) == ("benign-cold-start", "served-model-name-404-negative-control",
                                                        ROUTE_SUPPRESSED)
    assert got.error_source == "pt4.results_detail" and "does not exist" in got.error_text


def test_row3_streaming_red_with_boot_green():
    points = {"boot": {"ok": True, "seconds": 40.0, "failure": None, "detail": ""},
              "smoke": smoke({"plain-chat": "green", "streaming": "red"},
                             {"streaming": "a stream chunk is not an OpenAI chat completion chunk"})}
    got = classify(points)
    assert (got.failure_class, got.rule) == ("quant-unsupported", "streaming-dead-boot-green-145")
    points["boot"]["ok"] = False        # boot not green: row 3 does not apply
    assert classify(points).rule != "streaming-dead-boot-green-145"


@pytest.mark.parametrize("reason, cls, route", [
    ("engine-support-unknown/no-arch-row", "kernel-unsupported", ROUTE_FILE),
    ("no-arch-row", "kernel-unsupported", ROUTE_FILE),
    ("engine-support-unknown/runtime-incompatible", "unknown", ROUTE_REVIEW),
    ("disk-short", "unknown", ROUTE_REVIEW),
    ("hard-block", "unknown", ROUTE_REVIEW),
    ("hardware-sm-undetermined", "unknown", ROUTE_REVIEW),
    ("hardware-vram-undetermined", "unknown", ROUTE_REVIEW),
    ("no-fit-model", "unknown", ROUTE_REVIEW),
    ("repo-not-found", "unknown", ROUTE_REVIEW),
])
def test_rows_8_and_9_gate_aborts(reason, cls, route):
    got = classify({"gate": {"abort_reason": reason}}, gate_only=True)
    assert (got.failure_class, got.route) == (cls, route)
    assert got.error_source == "gate.abort_reason"


@pytest.mark.parametrize("token", ["compose-plugin-missing", "nvidia-runtime-missing", "port-in-use", "disk-full",
                                   "docker-daemon-unreachable", "docker-missing"])
def test_environment_failures_get_a_local_verdict_and_are_never_filed(token):
    text = json.loads(fixture_path("logs", "docker_env.json").read_text())[token]
    points = {"boot": {"ok": False, "seconds": 1.0, "failure": "compose-up-failed",
                       "detail": f"docker compose up -d exited 1: {boot_edge._tail_line(text)}",
                       "failure_log_excerpt": "", "actual": {}}}
    got = classify(points)
    assert (got.environment, got.route, got.tier) == (token, ROUTE_LOCAL, "environment")
    assert got.failure_class == "unknown" and got.next_step


# vLLM 0.32.0's own refusals of a launch setting, as its log prints them (tests/test_real_vllm.py
# provokes the first one on a real start)
LAUNCH_SETTING_ERRORS = {
    "max-model-len-over-model-limit":
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, User-specified max_model_len (100000) is greater than the derived max_model_len "
        "(max_position_embeddings=2560.0 or model_max_length=None in model's config.json). To allow overriding "
        "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
    "tool-call-parser-unknown":
        "KeyError: 'invalid tool call parser: no-such-parser (chose from { hermes,llama3_json,mistral })'",
}


@pytest.mark.parametrize("token", sorted(LAUNCH_SETTING_ERRORS))
def test_a_launch_setting_vllm_refuses_is_local(token):
    excerpt = "INFO 12-02 03:12:05 [api_utils.py:286] non-default args: {}\n" + LAUNCH_SETTING_ERRORS[token] + "\n"
    got = classify(boot_failed(excerpt, failure="process-exited"))
    assert (got.environment, got.route, got.tier) == (token, ROUTE_LOCAL, "environment")
    assert got.next_step and "Error:" in got.error_text


def test_a_download_that_ran_out_of_disk_is_local():
    got = classify({"download": {"ok": False, "files": 0, "bytes": 0, "sha_verified": False, "failure": "disk"}})
    assert (got.environment, got.route) == ("disk-full", ROUTE_LOCAL)


def test_tier2_exact_table_wins_over_the_matchers():
    points = boot_failed(log("undefined_symbol.log"))
    text = classify(points).error_text
    digest = hashlib.sha256((text + ARCH + ENGINE).encode()).hexdigest()[:12]
    table = replace(TABLE, exact={digest: "kernel-unsupported"})
    got = classify(points, table=table)
    assert (got.failure_class, got.tier, got.rule) == ("kernel-unsupported", "tier2-exact", digest)
    other = classify_points(points, arch_family="OtherArch", engine_version=ENGINE, gate_only=False, table=table)
    assert other.tier == "matcher"            # the salt makes the key arch- and engine-specific


def test_an_out_of_enum_class_in_data_is_coerced():
    points = boot_failed(log("undefined_symbol.log"))
    digest = classify(points).fingerprint
    got = classify(points, table=FingerprintTable(exact={digest: "made-up"}, matchers=()))
    assert got.failure_class == "unknown" and got.route == ROUTE_REVIEW


def test_unmatched_error_is_unknown_for_review():
    got = classify(boot_failed("ERROR 01-01 00:00:00 [x.py:1] ValueError: something nobody has seen\n"))
    assert (got.failure_class, got.route, got.tier) == ("unknown", ROUTE_REVIEW, "none")
    assert got.error_text == "ValueError: something nobody has seen"


def test_extraction_precedence_excerpt_then_failure_then_smoke():
    points = boot_failed("", failure="boot-timeout")
    points["boot"]["detail"] = "http://127.0.0.1:8000/v1/models not ready after 600s"
    points["smoke"] = smoke({"plain-chat": "red"}, {"plain-chat": "HTTP 500: boom"})
    got = classify(points)
    assert got.error_source == "pt3.failure" and got.error_text.startswith("boot-timeout: ")
    del points["boot"]
    got = classify(points)
    assert got.error_source == "pt4.results_detail" and got.error_text == "plain-chat: HTTP 500: boom"


def evidence_points(attempted, reported, per_gpu_mib, raw_verdict="fits"):
    per_gpu = {k: int(v * 2**20) for k, v in per_gpu_mib.items()}
    points = boot_failed(log("oom_v1_wrapped.log"),
                         actual={"attempted_alloc_mib": attempted, "gpu_worker_reported_mib": reported})
    points["gate"] = {"predicted_b_breakdown": {"per_gpu": per_gpu}, "raw_verdict": raw_verdict}
    return points


PER_GPU = {"weights_bytes": 14000, "non_torch_bytes": 500, "activation_bytes": 1500, "cudagraph_bytes": 500,
           "kv_pool_bytes": 4000}


def test_route_as_kv_calc_bug_needs_all_three_inputs_and_a_positive_delta():
    got = classify(evidence_points(2048.0, 20500.0, PER_GPU))
    assert got.route_as_kv_calc_bug is True and got.predicted_vs_actual_delta_mib == 2048.0
    assert classify(evidence_points(None, 20500.0, PER_GPU)).route_as_kv_calc_bug is False
    assert classify(evidence_points(2048.0, None, PER_GPU)).route_as_kv_calc_bug is False
    low = classify(evidence_points(100.0, 10000.0, PER_GPU))
    assert low.route_as_kv_calc_bug is False and low.predicted_vs_actual_delta_mib < 0
    assert classify(evidence_points(2048.0, 20500.0, PER_GPU, raw_verdict="wont-fit")).route_as_kv_calc_bug is False
    no_breakdown = evidence_points(2048.0, 20500.0, PER_GPU)
    no_breakdown["gate"]["predicted_b_breakdown"] = None
    assert classify(no_breakdown).route_as_kv_calc_bug is False


def test_the_table_loader_is_strict(tmp_path):
    text = SHIPPED.read_text()
    bad = tmp_path / "t.yaml"
    bad.write_text(text.replace("class: genuine-oom", "class: oom"))
    with pytest.raises(InputError, match="class 'oom'"):
        load_table(bad)
    bad.write_text(text.replace("exact_fingerprints: {}", "exact_fingerprints: {xyz: unknown}"))
    with pytest.raises(InputError, match="12 lower-case hex"):
        load_table(bad)
    bad.write_text(text.replace("predicate: pt3_timeout_but_pt4_green", "predicate: made_up"))
    with pytest.raises(InputError, match="predicate"):
        load_table(bad)
    assert load_table(extra_exact={"0123456789ab": "genuine-oom"}).exact == {"0123456789ab": "genuine-oom"}


def test_classes_routes_and_environment_tokens_are_documented():
    from pathlib import Path

    from club3090.reports.classify import ENVIRONMENT_RULES

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for token in (*FAILURE_CLASSES, ROUTE_FILE, ROUTE_LOCAL, ROUTE_REVIEW, ROUTE_SUPPRESSED,
                  *(rule[0] for rule in ENVIRONMENT_RULES)):
        assert f"`{token}`" in readme, token


def test_info_advice_about_memory_is_not_an_oom():
    # a boot that timed out after the v0.5 CUDA-graph advice line: no error line, no OOM
    got = classify(boot_failed(log("startup_v05_weights.log")))
    assert got.failure_class == "unknown" and got.tier == "none" and got.error_source == "pt3.failure"


def test_row7_out_of_memory_text_that_tier1_does_not_know():
    # Ray's host-memory monitor message (ray.exceptions.OutOfMemoryError): no CUDA, no "out of memory"
    text = "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    got = classify(boot_failed(text))
    assert (got.failure_class, got.tier, got.rule) == ("genuine-oom", "matcher", "genuine-oom-cuda")
