"""Capture bundles: slugs, redaction with planted secrets, gate-only bundles, keys, the reader."""

from __future__ import annotations

import hashlib
import json
import random
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from club3090 import __version__
from club3090.errors import InputError
from club3090.outcome import Reason, Stratum
from club3090.reports import capture
from club3090.reports import redact as redact_mod
from club3090.reports.capture import (
    Bundle,
    consensus_key,
    dedup_hash,
    dedup_key,
    kv_calc_version,
    latest_bundle,
    read_bundle,
    sanitize_slug,
    submission_fingerprint,
    topology_fields,
    write_gate_bundle,
)
from club3090.reports.redact import redact

NOW = datetime(2026, 8, 22, 13, 4, 5, tzinfo=timezone.utc)

# --- planted identity and secrets (shared with test_submit) -----------------------------------
HOME = "/home/alice"
USER = "alice"
HOST = "gpubox-7"
HF_TOKEN = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f"      # hf_ + 34 alphanumerics
IDENTITY = {"home": HOME, "user": USER, "host": HOST}
PLANTED = [HF_TOKEN, "HF_TOKEN=abc", "=abc", HOME, "alice", HOST, "/data/models/x", "/opt/vllm"]


def planted_gate() -> dict:
    return {
        "abort_reason": "engine-support-unknown/no-arch-row",
        "detail": {
            "config_path": f"{HOME}/.cache/huggingface/hub/models--x/config.json",
            "local_dir": "/data/models/x",
            "env": f"HF_TOKEN=abc HUGGING_FACE_HUB_TOKEN={HF_TOKEN}",
            "log": f"alice@{HOST}:/opt/vllm/bin$ curl -H 'Authorization: Bearer sekrit-token-123'",
            "api": "api_key=s3cr3t-value&x=1",
            "raw": f"token {HF_TOKEN} seen",
            "owner": "alice",
            "root_path": "/root/.cache/huggingface",
        },
        "confidence": "estimated-lower-bound",
        "raw_verdict": None,
        "terminal": None,
        "profile_like": "vllm/minimal",
        "hardware_sm": Decimal("8.6"),
        "predicted_b_breakdown": None,
        "stratum": Stratum.ENGINE_SUPPORT,
        "stratum_name": "C0_ENGINE_SUPPORT",
        "c0": {"state": Reason.ENGINE_SUPPORT_UNKNOWN, "sub_reason": "no-arch-row",
               "bypassable_by": frozenset({"--experimental-arch"})},
        "path": "B",
        "notices": [f"HF_HOME={HOME}/.cache/huggingface"],
    }


MANIFEST_FIELDS = {
    "model": "acme/Widget-7B",
    "model_id": "acme/Widget-7B",
    "quant_label": "BF16",
    "arch_family": "WidgetForCausalLM",
    "engine_pin": "vllm-stable@v0.22.0",
    "engine_version": "0.22.0",
    "kv_format": "fp8_e5m2",
    "topology_class": "2x24576MiB",
    "topology_summary_canonical": "[('NVIDIA GeForce RTX 3090', 24576), ('NVIDIA GeForce RTX 3090', 24576)]",
}


def write(root: Path, **overrides) -> Path:
    kwargs = dict(slug="acme/Widget-7B", gate=planted_gate(), manifest_fields=MANIFEST_FIELDS,
                  now=NOW, **IDENTITY)
    kwargs.update(overrides)
    return write_gate_bundle(root, **kwargs)


# --- slugs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("slug, expected", [
    ("Org/Model-Name", "org-model-name"),
    ("Qwen/Qwen3.6-27B-AWQ", "qwen-qwen3.6-27b-awq"),
    ("a//b  c", "a-b-c"),
    ("--x--", "x"),
    ("../../etc/passwd", "etc-passwd"),
    ("a..b...c", "a.b.c"),
    ("...", "model"),
    ("", "model"),
    ("  ", "model"),
    ("modèle/日本", "mod-le"),
    ("snake_case_ok", "snake_case_ok"),
    ("_x_", "x"),
    ("/data/models/x", "data-models-x"),
])
def test_sanitize_slug(slug, expected):
    assert sanitize_slug(slug) == expected


def test_sanitize_slug_caps_length_and_keeps_clean_ends():
    out = sanitize_slug("a" * 127 + "-" + "b" * 50)
    assert len(out) <= 128 and out == "a" * 127
    assert len(sanitize_slug("x" * 500)) == 128


def test_sanitize_slug_fuzz_is_always_a_safe_folder_name():
    rng = random.Random(3090)
    alphabet = "aZ09._-/ \\:*?<>|\x00é.."
    for _ in range(2000):
        out = sanitize_slug("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))))
        assert re.fullmatch(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?", out), out
        assert ".." not in out and "--" not in out and len(out) <= 128


# --- redaction --------------------------------------------------------------------------------

def test_redact_scrubs_every_planted_secret():
    cleaned = redact(planted_gate()["detail"] | {"notice": "ok"}, **IDENTITY, secrets=())
    text = json.dumps(cleaned)
    for secret in PLANTED:
        assert secret not in text, secret
    assert "sekrit-token-123" not in text and "s3cr3t-value" not in text
    detail = cleaned
    assert detail["config_path"] == "~/.cache/huggingface/hub/models--x/config.json"
    assert detail["local_dir"] == "<PATH>"
    assert detail["env"] == "HF_TOKEN=<REDACTED> HUGGING_FACE_HUB_TOKEN=<REDACTED>"
    assert detail["log"] == "<USER>@<HOST>:<PATH>$ curl -H 'Authorization: Bearer <REDACTED>'"
    assert detail["api"] == "api_key=<REDACTED>&x=1"
    assert detail["raw"] == "token hf_<REDACTED> seen"
    assert detail["owner"] == "<USER>"
    assert detail["root_path"] == "~/.cache/huggingface"


@pytest.mark.parametrize("text, expected", [
    ("malice and alicent stay", "malice and alicent stay"),       # user only as a whole word
    ("/scratch/alice/run", "/scratch/<USER>/run"),                 # ... or a path component
    ("GPUBOX-7.lab.example", "<HOST>.lab.example"),                 # host case-insensitively
    ("gpubox-77 is another machine", "gpubox-77 is another machine"),
    ("/home/alice2/x", "/home/alice2/x"),                           # not our home
    ("/home/alice", "~"),
    ("/root", "~"),
    ("/usr/root/x /rooted", "/usr/root/x /rooted"),
    ("/database/x /opt /mnt/disk1/hf", "/database/x <PATH> <PATH>"),
    ("/srv/data/x", "/srv/data/x"),                                 # only top-level /data
    ("file:///data/x", "file://<PATH>"),
    ("hf_short123", "hf_short123"),                                 # under 30: not a token
    ("Bearer abcdefgh12345", "Bearer <REDACTED>"),
    ('{"HF_TOKEN": "abc"}', '{"HF_TOKEN": "<REDACTED>"}'),
    ("engine-support-unknown/no-arch-row", "engine-support-unknown/no-arch-row"),
])
def test_redact_text_rules(text, expected):
    assert redact(text, **IDENTITY, secrets=()) == expected


def test_redact_literal_secrets_and_secret_keys():
    out = redact({"HF_TOKEN": "plainvalue", "nested": ["xyzzy-secret-1 here"]}, **IDENTITY,
                 secrets=["xyzzy-secret-1"])
    assert out == {"HF_TOKEN": "<REDACTED>", "nested": ["<REDACTED> here"]}


def test_redact_hides_the_secrets_it_is_given_and_reads_no_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "tok-not-hf-shaped-1234")
    assert redact("x tok-not-hf-shaped-1234 y", **IDENTITY) == "x tok-not-hf-shaped-1234 y"
    assert redact("x tok-not-hf-shaped-1234 y", **{**IDENTITY, "secrets": ("tok-not-hf-shaped-1234",)}) \
        == "x <REDACTED> y"


def test_redact_keeps_schema_keys_but_scrubs_other_keys():
    out = redact({"alice": 1, "model": "alice", "/data/x/f.safetensors": 2}, home=HOME, user="model",
                 host=HOST, secrets=())
    assert out == {"alice": 1, "model": "alice", "<PATH>": 2}
    out = redact({"Alice's file": 1}, home=HOME, user="Alice", host=HOST, secrets=())
    assert out == {"<USER>'s file": 1}


def test_redact_is_idempotent_and_leaves_non_strings():
    data = planted_gate()["detail"] | {"n": 3, "f": 1.5, "b": True, "none": None}
    once = redact(data, **IDENTITY, secrets=())
    assert redact(once, **IDENTITY, secrets=()) == once
    assert once["n"] == 3 and once["b"] is True and once["none"] is None


def test_redact_defaults_use_this_machine(monkeypatch):
    monkeypatch.setattr(redact_mod.socket, "gethostname", lambda: "box-under-test")
    monkeypatch.setattr(redact_mod.getpass, "getuser", lambda: "tester_user")
    monkeypatch.setattr(redact_mod.Path, "home", classmethod(lambda cls: Path("/home/tester_user")))
    assert redact("tester_user@box-under-test:/home/tester_user/x") == "<USER>@<HOST>:~/x"


def test_empty_identity_switches_rules_off():
    assert redact("alice@gpubox-7", home="", user="", host="", secrets=()) == "alice@gpubox-7"


# --- writing ----------------------------------------------------------------------------------

def test_gate_bundle_layout_and_contents(tmp_path):
    root = tmp_path / ".pull-captures"
    bundle = write(root)
    assert bundle == root / "acme-widget-7b" / "20260822T130405Z"
    assert sorted(p.name for p in bundle.iterdir()) == ["manifest.json", "pt1-gate.json"]
    assert (root / ".last").read_text() == "acme-widget-7b/20260822T130405Z\n"

    raw_gate = (bundle / "pt1-gate.json").read_text()
    gate = json.loads(raw_gate)
    assert raw_gate == json.dumps(gate, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert gate["schema"] == 2 and gate["point"] == "gate" and gate["is_gate_only"] is True
    assert gate["abort_reason"] == "engine-support-unknown/no-arch-row"
    assert gate["slug"] == "acme/Widget-7B"
    assert gate["hardware_sm"] == 8.6
    assert gate["stratum"] == 3
    assert gate["c0"] == {"state": "engine-support-unknown", "sub_reason": "no-arch-row",
                          "bypassable_by": ["--experimental-arch"]}
    for key in ("confidence", "raw_verdict", "terminal", "profile_like", "predicted_b_breakdown"):
        assert key in gate

    raw_manifest = (bundle / "manifest.json").read_text()
    manifest = json.loads(raw_manifest)
    assert raw_manifest == json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert manifest["schema"] == 2 and manifest["outcome"] == "hard-block"
    assert manifest["utc_ts"] == "20260822T130405Z"
    assert manifest["failure_class"] is None and manifest["capture_points"] == ["gate"]
    for key in ("selected_ctx", "kv_calc_version", "smoke_capability_set"):
        assert manifest[key] is None                                   # post-[C0]: never reached
    assert manifest["quant_label"] == "BF16"
    assert manifest["submission_fingerprint"] == submission_fingerprint(manifest)
    assert re.fullmatch(r"[0-9a-f]{64}", manifest["submission_fingerprint"])
    assert re.fullmatch(r"[0-9a-f]{40}", manifest["club3090_commit"]) or \
        manifest["club3090_commit"] == __version__


def test_planted_secrets_never_reach_the_bundle_files(tmp_path):
    root = tmp_path / ".pull-captures"
    bundle = write(root, slug="alice/private-model", manifest_fields={
        **MANIFEST_FIELDS, "model_id": "/data/models/x", "model": f"{HOME}/models/x"})
    for path in bundle.iterdir():
        text = path.read_text()
        for secret in [*PLANTED, "sekrit-token-123", "s3cr3t-value"]:
            assert secret not in text, (path.name, secret)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["slug"] == "<USER>/private-model"
    assert manifest["model_id"] == "<PATH>" and manifest["model"] == "~/models/x"
    assert manifest["submission_fingerprint"] == submission_fingerprint(manifest)


def test_fingerprint_matches_the_formula(tmp_path):
    manifest = json.loads((write(tmp_path) / "manifest.json").read_text())
    parts = [manifest["model"], manifest["club3090_commit"], manifest["topology_summary_canonical"],
             manifest["quant_label"], "", manifest["engine_version"], "20260822T130405Z", "hard-block"]
    assert manifest["submission_fingerprint"] == hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def test_explicit_commit_and_defaults(tmp_path):
    bundle = write(tmp_path, slug="Org/Only-Slug", manifest_fields={"club3090_commit": "abc1234"})
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["club3090_commit"] == "abc1234"
    assert manifest["model"] == manifest["model_id"] == "Org/Only-Slug"
    assert manifest["arch_family"] is None


def test_never_overwrites_an_existing_bundle(tmp_path):
    first = write(tmp_path)
    second = write(tmp_path)
    third = write(tmp_path)
    assert first.name == "20260822T130405Z"
    assert second.name == "20260822T130405Z-2" and third.name == "20260822T130405Z-3"
    assert (tmp_path / ".last").read_text().strip() == "acme-widget-7b/20260822T130405Z-3"
    assert latest_bundle(tmp_path) == third
    assert read_bundle(first).manifest["utc_ts"] == "20260822T130405Z"


def test_timestamp_is_utc_from_any_zone(tmp_path):
    local = NOW.astimezone(timezone(timedelta(hours=-7)))
    assert write(tmp_path, now=local).name == "20260822T130405Z"


# Each bad call differs from a good one by exactly the mistake, so the refusal is that mistake's.
@pytest.mark.parametrize("bad, good", [
    ({"now": datetime(2026, 8, 22, 13, 4, 5)}, {"now": NOW}),
    ({"gate": {"abort_reason": ""}}, {"gate": {"abort_reason": "disk-short"}}),
    ({"gate": {"detail": {}}}, {"gate": {"detail": {}, "abort_reason": "disk-short"}}),
    ({"gate": {"abort_reason": "disk-short", "surprise": 1}}, {"gate": {"abort_reason": "disk-short"}}),
    ({"manifest_fields": {"outcome": "ok"}}, {"manifest_fields": {}}),
], ids=["naive-now", "empty-abort-reason", "no-abort-reason", "unknown-gate-key", "unknown-manifest-key"])
def test_caller_mistakes_raise_and_write_nothing(tmp_path, bad, good):
    with pytest.raises(ValueError):
        write(tmp_path / "bad", **bad)
    assert not (tmp_path / "bad").exists() or list((tmp_path / "bad").iterdir()) == []
    assert read_bundle(write(tmp_path / "good", **good)).is_gate_only


def test_unserializable_value_is_a_type_error(tmp_path):
    with pytest.raises(TypeError):
        write(tmp_path, gate={"abort_reason": "disk-short", "detail": {"x": object()}})


def test_fit_results_with_to_json_are_stored(tmp_path):
    class FitLike:
        def to_json(self):
            return {"kv_cache_tokens": 1234, "raw_verdict": "wont-fit"}

    bundle = write(tmp_path, gate={"abort_reason": "hard-block", "predicted_b_breakdown": FitLike(),
                                   "raw_verdict": "wont-fit", "confidence": "exact",
                                   "terminal": "hard-block"})
    gate = read_bundle(bundle).gate
    assert gate["predicted_b_breakdown"] == {"kv_cache_tokens": 1234, "raw_verdict": "wont-fit"}
    assert gate["detail"] == {} and gate["notices"] == []


# --- reading ----------------------------------------------------------------------------------

def test_read_bundle_round_trip(tmp_path):
    bundle = read_bundle(write(tmp_path))
    assert isinstance(bundle, Bundle) and bundle.schema == 2 and bundle.is_gate_only
    assert bundle.gate["abort_reason"] == "engine-support-unknown/no-arch-row"
    assert set(bundle.points) == {"gate"}


def corrupt(bundle: Path, filename: str, mutate) -> None:
    path = bundle / filename
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))


# One field changed in a bundle that reads back fine (test_read_bundle_round_trip): the
# InputError naming that file is the refusal of exactly that change.
@pytest.mark.parametrize("filename, mutate", [
    ("manifest.json", lambda d: d.update(schema=3)),
    ("manifest.json", lambda d: d.update(schema=True)),
    ("manifest.json", lambda d: d.pop("kv_calc_version")),
    ("manifest.json", lambda d: d.update(failure_class="genuine-oom")),
    ("manifest.json", lambda d: d.update(outcome="ok")),
    ("manifest.json", lambda d: d.update(outcome="exploded")),
    ("manifest.json", lambda d: d.update(capture_points=["nope"])),
    ("pt1-gate.json", lambda d: d.update(point="boot")),
    ("pt1-gate.json", lambda d: d.update(is_gate_only=False)),
    ("pt1-gate.json", lambda d: d.update(abort_reason="")),
], ids=["schema-3", "schema-bool", "missing-key", "failure-class", "gate-only-ok", "unknown-outcome",
        "unknown-point", "wrong-point", "not-gate-only", "empty-abort-reason"])
def test_read_bundle_rejects_malformed(tmp_path, filename, mutate):
    bundle = write(tmp_path)
    corrupt(bundle, filename, mutate)
    with pytest.raises(InputError) as info:
        read_bundle(bundle)
    assert info.value.file == str(bundle / filename)


@pytest.mark.parametrize("outcome, accepted", [("failed", True), ("exploded", False)])
def test_read_schema1_bundle_checks_the_outcome(tmp_path, outcome, accepted):
    # schema 1 has no gate-only rule, so only the outcome check can refuse "exploded"
    directory = schema1_bundle(tmp_path / "b", outcome=outcome)
    if accepted:
        assert read_bundle(directory).manifest["outcome"] == outcome
        return
    with pytest.raises(InputError) as info:
        read_bundle(directory)
    assert info.value.file == str(directory / "manifest.json")


def test_read_bundle_rejects_non_json_non_object_and_oversized(tmp_path, monkeypatch):
    bundle = write(tmp_path)
    manifest = bundle / "manifest.json"
    valid = manifest.read_text()
    for text in ("{not json", "[1, 2]"):
        manifest.write_text(text)
        with pytest.raises(InputError) as info:
            read_bundle(bundle)
        assert info.value.file.endswith("manifest.json")
    valid = json.dumps({**json.loads(valid), "pad": "x" * 4096})   # still valid; the largest file
    manifest.write_text(valid)                                  # a valid manifest, one byte over the cap
    monkeypatch.setattr(capture, "BUNDLE_JSON_LIMIT", len(valid.encode()) - 1)
    with pytest.raises(InputError) as info:
        read_bundle(bundle)
    assert info.value.file.endswith("manifest.json")
    monkeypatch.setattr(capture, "BUNDLE_JSON_LIMIT", len(valid.encode()))
    assert read_bundle(bundle).schema == 2                      # at the cap it reads


def test_read_bundle_missing_pieces(tmp_path):
    with pytest.raises(InputError) as info:
        read_bundle(tmp_path / "nope")
    assert info.value.file == str(tmp_path / "nope")
    with pytest.raises(InputError) as info:
        read_bundle(tmp_path)
    assert info.value.file == str(tmp_path / "manifest.json")
    bundle = write(tmp_path)
    (bundle / "pt1-gate.json").unlink()
    with pytest.raises(InputError) as info:
        read_bundle(bundle)
    assert info.value.file == str(bundle / "pt1-gate.json")


def schema1_bundle(directory: Path, **manifest_overrides) -> Path:
    directory.mkdir(parents=True)
    manifest = {key: None for key in capture.MANIFEST_KEYS}
    manifest.update(MANIFEST_FIELDS, schema=1, slug="acme/Widget-7B", utc_ts="20260101T000000Z",
                    kv_calc_version="vllm-mem-1+0123456789ab", selected_ctx=32768,
                    smoke_capability_set=["plain-chat", "streaming"], failure_class=None,
                    club3090_commit="abc", outcome="failed",
                    capture_points=["gate", "download", "boot"], submission_fingerprint="f" * 64)
    manifest.update(manifest_overrides)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    for name, extra in (("gate", {"schema": 1}), ("download", {"ok": True}), ("boot", {"ok": False})):
        (directory / capture.POINT_FILES[name]).write_text(json.dumps({"point": name, **extra}))
    return directory


def test_read_schema1_bundle(tmp_path):
    bundle = read_bundle(schema1_bundle(tmp_path / "b"))
    assert bundle.schema == 1 and not bundle.is_gate_only
    assert set(bundle.points) == {"gate", "download", "boot"}


def test_read_schema1_bundle_missing_listed_point(tmp_path):
    directory = schema1_bundle(tmp_path / "b", capture_points=["gate", "download", "boot", "smoke"])
    with pytest.raises(InputError) as info:
        read_bundle(directory)
    assert info.value.file == str(directory / "pt4-smoke.json")


# --- .last ------------------------------------------------------------------------------------

def test_latest_bundle(tmp_path):
    assert latest_bundle(tmp_path) is None
    bundle = write(tmp_path)
    assert latest_bundle(tmp_path) == bundle


@pytest.mark.parametrize("content", ["../outside\n", "/etc\n", "\n", "acme-widget-7b/missing\n",
                                     b"\xff\xfe"])
def test_latest_bundle_refuses_odd_markers(tmp_path, content):
    (tmp_path / "outside").mkdir()
    write(tmp_path / "root")
    last = tmp_path / "root" / ".last"
    last.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert latest_bundle(tmp_path / "root") is None


def test_last_is_written_atomically_and_replaced(tmp_path):
    write(tmp_path, slug="a/one")
    write(tmp_path, slug="b/two")
    assert (tmp_path / ".last").read_text() == "b-two/20260822T130405Z\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".last.")] == []


# --- keys and versions ------------------------------------------------------------------------

def test_consensus_and_dedup_keys():
    manifest = {**MANIFEST_FIELDS, "kv_calc_version": "p+0123456789ab", "selected_ctx": 32768,
                "smoke_capability_set": ["streaming", "plain-chat"], "failure_class": None}
    key9 = consensus_key(manifest)
    assert len(key9) == 9
    assert key9[1] == "bf16"                                       # quant_label lowercased
    assert key9[3] == "2x24576MiB" and key9[6] == "32768"
    assert key9[8] == "plain-chat,streaming"
    key7 = dedup_key(manifest, "kernel-unsupported")
    assert key7 == ("acme/Widget-7B", "bf16", "WidgetForCausalLM", "p+0123456789ab", "0.22.0",
                    "kernel-unsupported", "2x24576MiB")
    assert dedup_key(manifest)[5] == ""
    expected = hashlib.sha256("\x1f".join(key7).encode()).hexdigest()[:12]
    assert dedup_hash(key7) == expected and re.fullmatch(r"[0-9a-f]{12}", expected)
    assert dedup_hash(dedup_key({**manifest, "quant_label": "bf16"}, "kernel-unsupported")) == expected


def test_kv_calc_version(tmp_path):
    src = tmp_path / "memory.py"
    src.write_text("# estimator\n")
    cal = tmp_path / "cal"
    cal.mkdir()
    (cal / "b.yaml").write_text("b: 1\n")
    (cal / "a.yaml").write_text("a: 1\n")
    files = [cal / "b.yaml", cal / "a.yaml"]
    version = kv_calc_version("vllm-mem-1", [src], files)
    assert re.fullmatch(r"vllm-mem-1\+[0-9a-f]{12}", version)
    assert kv_calc_version("vllm-mem-1", [src], list(reversed(files))) == version   # sorted by name
    expected = hashlib.sha256(b"\x1f".join([b"# estimator\n", b"a.yaml", b"a: 1\n", b"b.yaml",
                                             b"b: 1\n"])).hexdigest()[:12]
    assert version == f"vllm-mem-1+{expected}"
    (cal / "a.yaml").write_text("a: 2\n")
    assert kv_calc_version("vllm-mem-1", [src], files) != version
    assert kv_calc_version("vllm-mem-1", [src], [cal / "missing.yaml"]) == "vllm-mem-1"
    assert kv_calc_version("vllm-mem-1", [tmp_path / "gone.py"], []) == "vllm-mem-1"


def test_topology_fields():
    gib24 = 24576 * 2**20
    out = topology_fields([("NVIDIA GeForce RTX 4090", 24564 * 2**20), ("NVIDIA GeForce RTX 3090", gib24)])
    assert out == {"topology_class": "2x24564MiB",
                   "topology_summary_canonical":
                       "[('NVIDIA GeForce RTX 3090', 24576), ('NVIDIA GeForce RTX 4090', 24564)]"}
    assert topology_fields([]) == {"topology_class": None, "topology_summary_canonical": None}


def test_club3090_commit_is_hex_or_version():
    value = capture.club3090_commit()
    assert re.fullmatch(r"[0-9a-f]{40}", value) or value == __version__


def test_club3090_commit_outside_a_source_tree(tmp_path):
    assert capture._git_head(tmp_path / "site-packages" / "club3090") is None


def test_a_token_from_the_token_file_is_redacted_from_bundles(tmp_path):
    from club3090.settings import Settings

    token = "tok-from-a-file-not-hf-shaped-42"
    (tmp_path / "tokfile").write_text(token + "\n", encoding="utf-8")
    settings = Settings.from_env({"HF_HOME": str(tmp_path / "hf"), "HF_TOKEN_PATH": str(tmp_path / "tokfile")})
    assert token in settings.redaction_secrets
    bundle = write_gate_bundle(tmp_path / "caps", slug=f"org/{token}",
                               gate={"abort_reason": "repo-not-found", "detail": {"message": f"x {token} y"}},
                               manifest_fields={}, now=datetime(2026, 1, 1, tzinfo=timezone.utc),
                               secrets=settings.redaction_secrets, **IDENTITY)
    written = [p for p in (tmp_path / "caps").rglob("*") if p.is_file()]
    assert written and all(token not in p.read_text(encoding="utf-8") for p in written)
    assert token not in str(bundle)
