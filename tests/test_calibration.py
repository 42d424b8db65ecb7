"""club3090.fit.calibration: anchors priced from their own inputs, upstream's criterion and ours (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from club3090.catalog import load_catalog
from club3090.fit.calibration import (
    CONTEXT_RESERVE_BYTES,
    KV_TOKEN_TOLERANCE,
    UPSTREAM_SETS,
    AnchorScore,
    anchor_inputs,
    anchor_set,
    calibrate,
    score_anchors,
    upstream_tally,
)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def report(catalog):
    return calibrate(catalog)


def score(name: str, set_: str, *, upstream_ok: bool = True, strict_ok: bool = True) -> AnchorScore:
    return AnchorScore(name, set_, "-", None, None, None, None, None, None, upstream_ok, "", strict_ok, "")


def test_anchor_set_is_the_recorded_field(catalog):
    anchor = catalog.anchors[0]
    assert anchor_set(replace(anchor, id="vllm/x", set="kvcalc-current-8of8")) == "kvcalc-current-8of8"
    # the id is a label, not parsed
    assert anchor_set(replace(anchor, id="vllm/x:other-set:3", set="calibration_seed")) == "calibration_seed"


def test_upstream_sets_all_scored_and_passing(report):
    assert [t.name for t in report.upstream] == [name for name, _ in UPSTREAM_SETS]
    for t in report.upstream:
        assert t.scored == t.expected == t.passed
    assert report.upstream_all_pass


def test_recorded_inputs_win_over_the_profile(catalog):
    anchor = next(a for a in catalog.anchors if a.profile and a.tp)
    inputs = anchor_inputs(replace(anchor, mem_util=0.5, ctx=1234, max_num_seqs=3), catalog)
    assert inputs.shape.mem_util == 0.5 and inputs.shape.max_model_len == 1234 and inputs.shape.max_num_seqs == 3
    assert inputs.shape.tp == anchor.tp and inputs.world == anchor.gpu_count
    no_drafter = anchor_inputs(replace(anchor, drafter="none"), catalog)
    assert no_drafter.shape.num_speculative_tokens == 0 and no_drafter.shape.extra_weights_bytes == 0


def test_only_vllm_anchors_are_scored(catalog, report):
    vllm = [a for a in catalog.anchors
            if (e := anchor_inputs(a, catalog).engine) is not None and e.type == "vllm"]
    assert [s.anchor for s in report.scores] == [a.id for a in vllm]


def test_strict_is_at_least_as_strict_as_upstream(report):
    for s in report.scores:
        assert s.upstream_ok or not s.strict_ok
        if s.predicted_peak_bytes is not None and s.card_bytes is not None:
            assert s.predicted_peak_bytes > CONTEXT_RESERVE_BYTES
        if s.strict_ok and s.measured_kv_tokens and s.predicted_kv_tokens is not None:
            assert abs(s.predicted_kv_tokens - s.measured_kv_tokens) / s.measured_kv_tokens <= KV_TOKEN_TOLERANCE
    assert report.strict_passed == sum(s.passed for s in report.scores)


def test_missing_model_is_a_failed_row_not_an_error(catalog):
    anchor = next(a for a in catalog.anchors if a.profile)
    broken = replace(catalog, anchors=(replace(anchor, model="no-such-model", weights_bytes=None),))
    (row,) = score_anchors(broken)
    assert not row.upstream_ok and not row.strict_ok and row.predicted_kv_tokens is None


def test_tally_counts_only_upstream_sets():
    scores = [score("a", "kvcalc-current-8of8"), score("b", "kvcalc-current-8of8", upstream_ok=False),
              score("c", "compose")]
    tally = {t.name: (t.passed, t.scored, t.expected) for t in upstream_tally(scores)}
    assert tally == {"kvcalc-22of22-historical": (0, 0, 22), "kvcalc-current-8of8": (1, 2, 8)}


def test_json_document(report):
    doc = report.to_json()
    assert doc["ok"] is True and doc["upstream_all_pass"] is True
    assert set(doc["upstream"]) == {name for name, _ in UPSTREAM_SETS}
    assert doc["strict"]["total"] == len(doc["anchors"]) == len(report.scores)
    assert {"anchor", "set", "upstream_ok", "strict_ok", "predicted_kv_tokens"} <= set(doc["anchors"][0])


def test_strict_calibration_count_and_over_prediction(report):
    """Issue 13's gate: strict >= 49/50; measured pools over-predicted (the false-"fits" direction)
    by more than 5 % only where docs/ACCURACY.md names the cause, and never beyond the band's
    known outlier (the approximate Gemma 4 12B single row)."""
    assert report.strict_passed >= 49
    over = {s.anchor: (s.predicted_kv_tokens - s.measured_kv_tokens) / s.measured_kv_tokens
            for s in report.scores if s.measured_kv_tokens and s.predicted_kv_tokens}
    assert len(over) >= 11
    known = {"vllm/qwen-27b-dual-max:compose/doc", "vllm/gemma-26ba4b-dual:compose/doc",
             "vllm/gemma-26ba4b-dual:compose/doc:2", "vllm/gemma-12b-single-int8-mtp:compose/doc"}
    assert {a for a, e in over.items() if e > 0.05} <= known
    # the Gemma 4 26B-A4B at TP 2 (~1.6 GiB per rank unexplained, with and without the drafter) and
    # the preview-build 12B single are the documented outliers; everything else stays in the band
    assert max(e for a, e in over.items() if a not in known) <= 0.05
    assert max(e for a, e in over.items() if a != "vllm/gemma-12b-single-int8-mtp:compose/doc") <= 0.16


def test_encoder_profiling_follows_the_shipped_compose(catalog):
    from club3090.fit.shape import profile_encoder_profiling

    assert profile_encoder_profiling(catalog.profiles["vllm/long-text"]) is False        # --language-model-only
    assert profile_encoder_profiling(catalog.profiles["vllm/gemma-26ba4b-dual"]) is False  # image 0, audio 0
    assert profile_encoder_profiling(catalog.profiles["vllm/qwen-35b-a3b-dual"]) is True   # image 2
    assert profile_encoder_profiling(catalog.profiles["vllm/dual"]) is True
    assert profile_encoder_profiling(None) is True
