"""outcome.Stop.token: which strata carry their sub-reason in the printed token."""

from __future__ import annotations

import pytest

from club3090.outcome import Reason, Stop, Stratum


@pytest.mark.parametrize("stop, token", [
    (Stop(Stratum.DERIVER, Reason.UNSUPPORTED_FORMAT, sub_reason="gguf-only"), "unsupported-format"),
    (Stop(Stratum.DERIVER, Reason.REPO_NOT_FOUND, sub_reason="not-found"), "repo-not-found"),
    (Stop(Stratum.DERIVER, Reason.QUANT_DTYPE_UNKNOWN), "quant-dtype-unknown"),
    (Stop(Stratum.ENGINE_SUPPORT, Reason.ENGINE_SUPPORT_UNKNOWN, sub_reason="no-arch-row"),
     "engine-support-unknown/no-arch-row"),
    (Stop(Stratum.ENGINE_SUPPORT, Reason.NEEDS_TRC_ACK), "needs-trust-remote-code-ack"),
    (Stop(Stratum.PROFILE_LIKE, Reason.PROFILE_MISMATCH, sub_reason="x"), "profile-mismatch"),
    (Stop(Stratum.COMPOSE_DRY_RUN, Reason.D_REFUSED, sub_reason="trc"), "d-refused:trc"),
])
def test_token(stop, token):
    assert stop.token == token


def test_pull_reports_a_stratum1_case_beside_the_bare_token(tmp_path):
    from club3090.catalog import load_catalog
    from club3090.pipeline import pull
    from club3090.settings import Settings

    stop = Stop(Stratum.DERIVER, Reason.UNSUPPORTED_FORMAT, sub_reason="gguf-only")
    from tests.providers import offline_rig

    r = pull.evaluate(pull.PullRequest("acme/gguf", "vllm/minimal", dry_run=True),
                      offline_rig(Settings(hf_home=tmp_path), facts=stop), catalog=load_catalog(),
                      captures_root=tmp_path / "captures")
    assert (int(r.stratum), r.reason, r.sub_reason) == (1, "unsupported-format", "gguf-only")


def test_notice_codes_are_stable_tokens_and_notices_dedupe_on_code_and_text():
    import re

    from club3090.outcome import Notice, NoticeCode

    values = [c.value for c in NoticeCode]
    assert len(values) == len(set(values)) and all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", v) for v in values)
    a = Notice(NoticeCode.BYPASSED, "t", {"token": "x", "flags": ("--yes",)})
    assert a.code == "bypassed" and type(a.code) is str and a == Notice("bypassed", "t")
    assert list(dict.fromkeys([a, Notice("bypassed", "t"), Notice("bypassed", "u")])) == [a, Notice("bypassed", "u")]
    assert a.to_json() == {"code": "bypassed", "text": "t", "data": {"token": "x", "flags": ["--yes"]}}
    with pytest.raises(ValueError):
        Notice("no-such-code", "t")


def test_a_stops_detail_is_read_only_whoever_built_it():
    given = {"message": "m", "profile_like": "vllm/x"}
    stop = Stop(Stratum.PROFILE_LIKE, Reason.UNKNOWN_PROFILE_LIKE, detail=given)
    given["message"] = "changed after"
    assert stop.detail["message"] == "m"
    with pytest.raises(TypeError):
        stop.detail["message"] = "x"  # type: ignore[index]
