"""Submission: the exact redacted payload, the consent matrix, gh dedup, and the URL fallback."""

from __future__ import annotations

import io
import json
import subprocess
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from club3090.errors import InputError
from club3090.reports import submit as submit_mod
from club3090.reports.capture import read_bundle, write_gate_bundle
from club3090.reports.submit import (
    CLUB3090_ISSUES_REPO,
    MAX_URL_BYTES,
    body_dedup_key,
    classify,
    submit,
)
from tests.test_capture import (
    HF_TOKEN,
    IDENTITY,
    MANIFEST_FIELDS,
    NOW,
    PLANTED,
    planted_gate,
)

GH = "/usr/local/bin/gh"
LABELS = ["label-create"] * 3          # the three labels are bootstrapped before `issue create`
SECRETS = [*PLANTED, "sekrit-token-123", "s3cr3t-value"]


class Ask:
    def __init__(self, reply):
        self.reply = reply
        self.prompts: list[str] = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


class FakeGh:
    """subprocess.run stand-in for the gh CLI: canned answers per subcommand."""

    def __init__(self, issues=(), *, fail=None, list_stdout=None):
        self.issues = list(issues)
        self.fail = fail or {}
        self.list_stdout = list_stdout
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append((list(argv), kwargs))
        assert argv[0] == GH and kwargs.get("timeout")
        sub = argv[2] if argv[1] == "issue" else f"{argv[1]}-{argv[2]}"
        failure = self.fail.get(sub)
        if isinstance(failure, BaseException):
            raise failure
        if failure is not None:
            return subprocess.CompletedProcess(argv, failure, "", "HTTP 401: Bad credentials")
        if sub == "label-create":
            return subprocess.CompletedProcess(argv, 0, "", "")
        if sub == "list":
            out = self.list_stdout if self.list_stdout is not None else json.dumps(self.issues)
            return subprocess.CompletedProcess(argv, 0, out, "")
        if sub == "create":
            return subprocess.CompletedProcess(argv, 0, f"https://github.com/{CLUB3090_ISSUES_REPO}/issues/42\n", "")
        if sub == "comment":
            return subprocess.CompletedProcess(
                argv, 0, f"https://github.com/{CLUB3090_ISSUES_REPO}/issues/{argv[3]}#issuecomment-1\n", "")
        raise AssertionError(f"unexpected gh call {argv}")

    def subcommands(self):
        return [argv[2] if argv[1] == "issue" else f"{argv[1]}-{argv[2]}" for argv, _ in self.calls]


def make_bundle(root: Path, gate=None, **fields) -> Path:
    return write_gate_bundle(root, slug="acme/Widget-7B", gate=gate or planted_gate(),
                             manifest_fields={**MANIFEST_FIELDS, **fields}, now=NOW, **IDENTITY)


def run_submit(bundle: Path, reply, *, gh=GH, run=None):
    out = io.StringIO()
    ask = Ask(reply)
    run = run if run is not None else FakeGh()
    result = submit(bundle, ask=ask, out=out, gh=gh, run=run, **IDENTITY)
    return result, out.getvalue(), ask, run


def everything_sent(run: FakeGh) -> str:
    return "\n".join(" ".join(argv) + "\n" + str(kwargs.get("input") or "") for argv, kwargs in run.calls)


# --- consent ----------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, proceeds", [
    ("y", True), ("Y", True), ("yes", True), ("Yes please", True), ("  y", True),
    ("n", False), ("", False), ("no", False), ("sure", False), ("\n", False),
    (EOFError(), False), (KeyboardInterrupt(), False),
])
def test_consent_matrix(tmp_path, reply, proceeds):
    result, _out, ask, run = run_submit(make_bundle(tmp_path), reply)
    assert ask.prompts == [submit_mod.PROMPT]                    # asked exactly once
    if proceeds:
        assert result.action == "created" and result.sent and result.issue == 42
        assert run.subcommands() == ["list", *LABELS, "create"]
    else:
        assert result.action == "declined" and not result.sent
        assert run.calls == []                                   # not one gh call without consent
        assert result.url is None and result.issue is None


def test_decline_without_gh_prints_no_url(tmp_path):
    result, out, _, _ = run_submit(make_bundle(tmp_path), "n", gh=None)
    assert result.action == "declined" and result.url is None and "issues/new" not in out


# --- the payload --------------------------------------------------------------------------------

def test_payload_shown_is_exactly_what_gh_sends(tmp_path):
    result, out, _, run = run_submit(make_bundle(tmp_path), "y")
    payload = result.payload
    assert payload.title in out and payload.body in out
    for label in payload.labels:
        assert label in out
    create_argv, create_kwargs = run.calls[-1]
    label_argvs = [argv for argv, _ in run.calls if argv[1] == "label"]
    assert [a[3] for a in label_argvs] == list(payload.labels) and all("--force" in a for a in label_argvs)
    assert create_kwargs["input"] == payload.body
    assert create_argv[create_argv.index("--title") + 1] == payload.title
    assert create_argv[create_argv.index("--repo") + 1] == CLUB3090_ISSUES_REPO
    labels = [create_argv[i + 1] for i, a in enumerate(create_argv) if a == "--label"]
    assert labels == list(payload.labels)
    assert labels == [f"loop:dedup-{result.dedup_hash}", "class:kernel-unsupported",
                      "arch:widgetforcausallm"]
    list_argv, _ = run.calls[0]
    assert list_argv[2:] == ["list", "--repo", CLUB3090_ISSUES_REPO, "--label",
                             f"loop:dedup-{result.dedup_hash}", "--state", "all", "--json", "number,body",
                             "--limit", "100"]


def test_payload_carries_manifest_gate_and_dedup_key(tmp_path):
    bundle = make_bundle(tmp_path)
    result, _, _, _ = run_submit(bundle, "n")
    body = result.payload.body
    key = body_dedup_key(body)
    assert key == ["acme/Widget-7B", "bf16", "WidgetForCausalLM", "", "0.22.0", "kernel-unsupported",
                   "2x24576MiB"]
    assert '"abort_reason": "engine-support-unknown/no-arch-row"' in body
    assert '"outcome": "hard-block"' in body
    manifest = read_bundle(bundle).manifest
    assert manifest["submission_fingerprint"] in body
    assert result.payload.title == "[loop] kernel-unsupported: acme/Widget-7B (engine-support-unknown/no-arch-row)"


def test_planted_secrets_never_reach_the_payload_or_gh(tmp_path):
    result, out, _, run = run_submit(make_bundle(tmp_path), "yes")
    sent = everything_sent(run)
    for secret in SECRETS:
        assert secret not in out, secret
        assert secret not in sent, secret
        assert secret not in result.payload.body and secret not in result.payload.title


def test_payload_is_re_redacted_even_if_the_bundle_on_disk_was_not(tmp_path):
    bundle = make_bundle(tmp_path)
    gate_path = bundle / "pt1-gate.json"
    gate = json.loads(gate_path.read_text())
    gate["detail"] = {"leak": f"{IDENTITY['home']}/x HF_TOKEN=abc {HF_TOKEN} /data/models/x alice@gpubox-7"}
    gate_path.write_text(json.dumps(gate))                       # e.g. written by an older tool
    result, out, _, _ = run_submit(bundle, "n")
    for secret in SECRETS:
        assert secret not in out, secret
    assert "~/x HF_TOKEN=<REDACTED> hf_<REDACTED> <PATH> <USER>@<HOST>" in result.payload.body


def test_without_gh_a_filed_class_spools_to_the_dedup_queue(tmp_path):
    result, _out, _, run = run_submit(make_bundle(tmp_path), "y", gh=None)
    assert result.action == "spooled" and not result.sent and run.calls == []
    assert result.spool == tmp_path / "_dedup-queue" / f"{result.dedup_hash}.json"
    entry = json.loads(result.spool.read_text())
    assert entry["body"] == result.payload.body and entry["count"] == 1
    assert entry["dedup_key"] == body_dedup_key(result.payload.body)
    same, _, _, _ = run_submit(result.spool.parent.parent / "acme-widget-7b" / "20260822T130405Z", "y", gh=None)
    assert json.loads(same.spool.read_text())["count"] == 1          # the same bundle twice: one report
    later = write_gate_bundle(tmp_path, slug="acme/Widget-7B", gate=planted_gate(), manifest_fields=MANIFEST_FIELDS,
                              now=NOW + timedelta(minutes=5), **IDENTITY)
    again, _, _, _ = run_submit(later, "y", gh=None)                   # another bundle, same key: counted
    assert again.spool == result.spool and json.loads(result.spool.read_text())["count"] == 2


def test_no_url_link_is_sent_anywhere_but_printed(tmp_path):
    result, out, _, run = run_submit(make_bundle(tmp_path), "y", gh=None)
    assert result.action == "spooled" and not result.sent and run.calls == []
    assert result.url in out
    parts = urlsplit(result.url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "github.com",
                                                        f"/{CLUB3090_ISSUES_REPO}/issues/new")
    query = parse_qs(parts.query)
    assert query["title"] == [result.payload.title]
    assert query["body"] == [result.payload.body]
    assert query["labels"] == [",".join(result.payload.labels)]
    for secret in SECRETS:
        assert secret not in result.url


def test_url_is_capped_under_8_kb_with_a_note(tmp_path):
    gate = planted_gate()
    gate["notices"] = [f"notice {i}: " + "ä" * 200 for i in range(100)]   # ~40 KB of body
    result, _out, _, _ = run_submit(make_bundle(tmp_path, gate=gate), "y", gh=None)
    assert len(result.url) <= MAX_URL_BYTES < 8192
    body = parse_qs(urlsplit(result.url).query)["body"][0]
    assert body.endswith(submit_mod.TRUNCATION_NOTE)
    assert result.payload.body.startswith(body[: -len(submit_mod.TRUNCATION_NOTE)])
    assert body_dedup_key(body) is not None                        # the dedup key survives the cut
    assert len(body) > 1000


def test_gh_is_looked_up_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setattr(submit_mod.shutil, "which", lambda name: None)
    out = io.StringIO()
    result = submit(make_bundle(tmp_path), ask=Ask("y"), out=out, run=FakeGh(), **IDENTITY)
    assert result.action == "spooled"


# --- dedup ----------------------------------------------------------------------------------------

def test_matching_issue_gets_a_plus_one(tmp_path):
    bundle = make_bundle(tmp_path)
    probe, _, _, _ = run_submit(bundle, "n")
    existing = [{"number": 7, "body": "other text"}, {"number": 9, "body": probe.payload.body}]
    result, out, _, run = run_submit(bundle, "y", run=FakeGh(existing))
    assert result.action == "commented" and result.issue == 9 and result.sent
    assert run.subcommands() == ["list", "comment"]
    argv, kwargs = run.calls[1]
    assert argv[3] == "9" and "--repo" in argv
    assert kwargs["input"].endswith(probe.payload.body)
    assert "#9" in out


def test_label_hit_with_a_different_tuple_files_a_new_issue(tmp_path):
    other = "```json\n" + json.dumps({"dedup_key": ["x"] * 7}) + "\n```"
    result, _, _, run = run_submit(make_bundle(tmp_path), "y", run=FakeGh([{"number": 3, "body": other}]))
    assert result.action == "created" and run.subcommands() == ["list", *LABELS, "create"]


@pytest.mark.parametrize("fail, list_stdout, steps", [
    ({"list": 1}, None, ["list"]),
    ({"list": subprocess.TimeoutExpired(["gh"], 60)}, None, ["list"]),
    ({"list": FileNotFoundError(2, "No such file")}, None, ["list"]),
    ({}, "not json", ["list"]),
    ({}, '{"not": "a list"}', ["list"]),
    ({"create": 1}, None, ["list", *LABELS, "create"]),
    ({"label-create": 1}, None, ["list", "label-create"]),
], ids=["list-exit-1", "list-timeout", "no-gh", "list-not-json", "list-not-a-list", "create-exit-1",
        "label-exit-1"])
def test_gh_failures_are_reported_not_raised(tmp_path, fail, list_stdout, steps):
    run = FakeGh(fail=fail, list_stdout=list_stdout)
    result, out, _, _ = run_submit(make_bundle(tmp_path), "y", run=run)
    assert result.action == "gh-failed" and not result.sent and result.issue is None and result.error
    assert run.subcommands() == steps                              # it stopped at the failing gh step
    if any(isinstance(f, int) for f in fail.values()):
        assert "HTTP 401: Bad credentials" in result.error          # gh's own stderr is passed on
    assert result.url and result.url in out                        # a manual route remains
    assert parse_qs(urlsplit(result.url).query)["body"] == [result.payload.body]
    assert json.loads(result.spool.read_text())["body"] == result.payload.body   # and a later try


def test_comment_failure_is_reported(tmp_path):
    bundle = make_bundle(tmp_path)
    probe, _, _, _ = run_submit(bundle, "n")
    gh = FakeGh([{"number": 9, "body": probe.payload.body}], fail={"comment": 1})
    result, out, _, _ = run_submit(bundle, "y", run=gh)
    assert result.action == "gh-failed" and not result.sent and gh.subcommands() == ["list", "comment"]
    assert "HTTP 401: Bad credentials" in result.error and result.url in out and result.spool.is_file()


# --- classification and input errors ---------------------------------------------------------

@pytest.mark.parametrize("abort_reason, expected", [
    ("engine-support-unknown/no-arch-row", "kernel-unsupported"),
    ("engine-support-unknown/runtime-incompatible", "unknown"),
    ("disk-short", "unknown"),
    ("hard-block", "unknown"),
    ("hardware-sm-undetermined", "unknown"),
    ("no-fit-model", "unknown"),
])
def test_gate_only_classifier(tmp_path, abort_reason, expected):
    bundle = read_bundle(make_bundle(tmp_path, gate={"abort_reason": abort_reason}))
    assert classify(bundle).failure_class == expected
    result, _, ask, run = run_submit(bundle.path, "n")
    assert f"class:{expected}" in result.payload.labels
    if expected == "unknown":     # the review queue: never offered publicly, nothing asked or run
        assert result.action == "review-queued" and ask.prompts == [] and run.calls == []
        assert result.spool.parent.name == "_review-queue" and result.spool.is_file()


def test_arch_label_is_capped_and_defaulted(tmp_path):
    result, _, _, _ = run_submit(make_bundle(tmp_path, arch_family="X" * 80), "n")
    assert result.payload.labels[2] == "arch:" + "x" * 45
    result, _, _, _ = run_submit(make_bundle(tmp_path / "b", arch_family=None), "n")
    assert result.payload.labels[2] == "arch:unknown"


def test_malformed_bundle_raises_input_error_before_asking(tmp_path):
    bundle = make_bundle(tmp_path)
    (bundle / "manifest.json").write_text("{")
    ask, run = Ask("y"), FakeGh()
    with pytest.raises(InputError):
        submit(bundle, ask=ask, out=io.StringIO(), gh=GH, run=run)
    assert ask.prompts == [] and run.calls == []


# --- [E] bundles: classification wired into submission -----------------------------------------

def e_bundle(root: Path, boot: dict, smoke: dict | None = None, outcome: str = "failed") -> Path:
    from club3090.reports.capture import write_e_bundle
    gate = {"confidence": "estimated-lower-bound", "raw_verdict": "fits", "terminal": "proceed",
            "predicted_b_breakdown": None}
    points = {"download": {"ok": True, "files": 3, "bytes": 100, "sha_verified": True, "failure": None},
              "boot": boot}
    if smoke is not None:
        points["smoke"] = smoke
    return write_e_bundle(root, slug="acme/Widget-7B", gate=gate, points=points,
                          manifest_fields={**MANIFEST_FIELDS, "kv_calc_version": "club3090-memory+abc"},
                          outcome=outcome, now=NOW, **IDENTITY)


def failed_boot(excerpt: str, failure: str = "boot-timeout", detail: str = "") -> dict:
    from club3090.edges.boot import parse_actual
    return {"ok": False, "seconds": 600.0, "failure": failure, "detail": detail, "failure_log_excerpt": excerpt,
            "actual": {k: v for k, v in parse_actual(excerpt).items()
                       if k in ("attempted_alloc_mib", "gpu_worker_reported_mib")}}


def test_an_e_bundle_with_a_cuda_oom_in_its_boot_log_is_genuine_oom_and_filed(tmp_path):
    from tests.fixtures_path import fixture_path
    excerpt = fixture_path("logs", "oom_v1_wrapped.log").read_text()
    bundle = e_bundle(tmp_path, failed_boot(excerpt))
    assert read_bundle(bundle).points["boot"]["actual"]["attempted_alloc_mib"] == 2560.0
    result, _out, ask, _run = run_submit(bundle, "y")
    assert result.failure_class == "genuine-oom" and result.classification.tier == "tier1-oom"
    assert result.action == "created" and "class:genuine-oom" in result.payload.labels
    assert "Tried to allocate 2.50 GiB" in result.payload.body
    assert "route as kv-calc bug: `false`" in result.payload.body      # no predicted breakdown in pt1
    assert ask.prompts == [submit_mod.PROMPT]


def test_an_environment_failure_is_local_and_never_offered(tmp_path):
    from club3090.edges.boot import _tail_line
    text = "docker: 'compose' is not a docker command.\nSee 'docker --help'"
    boot = failed_boot("", failure="compose-up-failed", detail=f"docker compose up -d exited 1: {_tail_line(text)}")
    result, out, ask, run = run_submit(e_bundle(tmp_path, boot), "y")
    assert result.action == "local" and ask.prompts == [] and run.calls == []
    assert "compose-plugin-missing" in out and "docker-compose-plugin" in out
    assert not (tmp_path / "_dedup-queue").exists() and not (tmp_path / "_review-queue").exists()


def test_a_cold_start_that_smoked_green_is_suppressed(tmp_path):
    smoke = {"smoke_capability_set": ["plain-chat", "streaming"],
             "results": {"plain-chat": "green", "streaming": "green"}, "partial": False,
             "results_detail": {"plain-chat": {"status": "green", "error": None},
                                "streaming": {"status": "green", "error": None}}}
    result, _out, ask, run = run_submit(e_bundle(tmp_path, failed_boot(""), smoke, outcome="partial"), "y")
    assert (result.failure_class, result.action) == ("benign-cold-start", "suppressed")
    assert ask.prompts == [] and run.calls == []


def test_an_unclassified_e_bundle_goes_to_review_not_public(tmp_path):
    bundle = e_bundle(tmp_path, failed_boot("ERROR 01-01 00:00:00 [x.py:1] ValueError: never seen before\n"))
    result, _out, ask, run = run_submit(bundle, "y")
    assert result.action == "review-queued" and ask.prompts == [] and run.calls == []
    entry = json.loads(result.spool.read_text())
    assert entry["failure_class"] == "unknown" and "never seen before" in entry["body"]


def test_a_local_model_folder_never_reaches_the_payload(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("client-acme/secret-proj").mkdir(parents=True)
    bundle = write_gate_bundle(tmp_path / "caps", slug="client-acme/secret-proj", gate=planted_gate(),
                               manifest_fields={**MANIFEST_FIELDS, "model_id": "client-acme/secret-proj",
                                                "model": "./client-acme/secret-proj"}, now=NOW, **IDENTITY)
    result, out, _, run = run_submit(bundle, "y")
    shown = out + everything_sent(run) + result.payload.body + result.payload.title
    for planted in ("secret-proj", "client-acme", *SECRETS):
        assert planted not in shown, planted
