"""Routing policy (issue 28 item 3): the catalog's engine_preference x engine_defaults pick the engine
`up` serves a curated model on, deprecated profiles stop `up` with their replacement named, a person's
default profile per model (`profiles --set-default`) feeds pull / fits, `profiles MODEL` prints a quick
start, and kv-calc answers a renamed slug through the catalog's aliases."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.errors import UsageError
from club3090.gate.routing import route
from club3090.pipeline.routing import choose_profile
from tests import test_up as up_tests
from tests import test_up_llamacpp as llama
from tests.llama_server import free_port
from tests.providers import offline_here, plenty_of_disk

env, gguf, stopper = llama.env, llama.gguf, up_tests.stopper          # the real llama.cpp server fixtures
MODEL = "qwen3.6-27b"


def prefer(catalog: Any, klass: str, order: tuple[str, ...], defaults: dict[str, str]) -> Any:
    """``catalog`` with upstream's ``engine_preference[klass]`` = ``order`` and MODEL's
    ``engine_defaults`` for ``klass`` = ``defaults`` (family -> profile)."""
    up = catalog.upstream["club-3090"]
    pref = {**up.engine_preference, klass: order}
    model = catalog.models[MODEL]
    families = {f: {**dict(model.engine_defaults.get(f, {})), klass: k} for f, k in defaults.items()}
    models = {**catalog.models, MODEL: dataclasses.replace(model, engine_defaults=families)}
    return dataclasses.replace(catalog, models=models,
                               upstream={**catalog.upstream, "club-3090": dataclasses.replace(up, engine_preference=pref)})


# --------------------------------------------------------------------------------------------
# the decision (pure)
# --------------------------------------------------------------------------------------------

def test_shipped_routing_follows_engine_preference_then_engine_defaults():
    cat = load_catalog()
    deckard = route(cat, "qwen3.6-40b-deckard", 2)    # dual prefers vllm, but only llamacpp has a default
    assert deckard is not None and deckard.family == "llamacpp"
    assert deckard.profile == cat.models["qwen3.6-40b-deckard"].engine_defaults["llamacpp"]["dual"]
    assert route(cat, MODEL, 1).profile == cat.models[MODEL].engine_defaults["vllm"]["single"]  # type: ignore[union-attr]
    assert route(cat, "no-such-model", 1) is None


def test_order_decides_between_two_engines():
    cat = load_catalog()
    both = {"llamacpp": llama.PROFILE, "vllm": "vllm/minimal"}
    alive = dataclasses.replace(cat, profiles={**cat.profiles, llama.PROFILE: dataclasses.replace(
        cat.profiles[llama.PROFILE], status="production")})
    first = prefer(alive, "single", ("llamacpp", "vllm"), both)
    assert route(first, MODEL, 1).profile == llama.PROFILE                     # type: ignore[union-attr]
    assert route(prefer(alive, "single", ("vllm", "llamacpp"), both), MODEL, 1).profile == "vllm/minimal"  # type: ignore[union-attr]
    # the person named a vLLM repo: only profiles of those weights
    assert route(first, MODEL, 1, variant="autoround-int4").profile == "vllm/minimal"  # type: ignore[union-attr]
    # a deprecated default is never routed to
    assert route(prefer(cat, "single", ("llamacpp", "vllm"), both), MODEL, 1).profile == "vllm/minimal"  # type: ignore[union-attr]


def test_deprecated_profile_names_its_replacement():
    cat = load_catalog()
    old = next(p for p in cat.profiles.values() if p.status == "deprecated" and p.replaced_by)
    with pytest.raises(UsageError) as err:
        choose_profile(cat, MODEL, old.key, allow_deprecated=False)
    assert old.key in str(err.value) and old.replaced_by in str(err.value) and "--allow-deprecated" in str(err.value)
    assert choose_profile(cat, MODEL, old.key, allow_deprecated=True).profile_like == old.key
    assert choose_profile(cat, MODEL, old.key).profile_like == old.key          # pull: not refused here


# --------------------------------------------------------------------------------------------
# end to end
# --------------------------------------------------------------------------------------------

def test_up_serves_a_model_whose_preference_names_llamacpp_on_llamacpp(env, stopper, capsys):
    routed = prefer(env["catalog"], "single", ("llamacpp", "vllm"), {"llamacpp": llama.PROFILE, "vllm": "vllm/minimal"})
    env = {**env, "provider": lambda settings: llama.LiveProvider(settings, free_disk=lambda _p: 10**15,
                                                                  load=lambda: routed)}
    run = env["tmp"] / "run"
    stopper.append(run)
    code = llama.run_cli(env, "up", MODEL, "--gpus", "1x3090", "--dir", str(run), "--launcher", "native",
                         "--port", str(free_port()))
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert f"note: routing {MODEL}: engine_preference[single] = ['llamacpp', 'vllm']" in captured.err
    assert "[up] SERVING" in captured.out
    # the cliffs of llama.cpp's shape print first; the arch row's vLLM-only ones do not apply to it
    from club3090.gate.cliffs import known_cliffs

    expected = [c.line() for c in known_cliffs(routed, profile=routed.profiles[llama.PROFILE])]
    out = captured.out.splitlines()
    assert out[:len(expected)] == expected and not any(line.startswith("known cliff") for line in out[len(expected):])
    vllm_only = [kc.text for kc in routed.arch_row_for_model(MODEL).kernel_constraints
                 if kc.applies_when.engines == ("vllm",)]
    assert vllm_only and not any(text in captured.out for text in vllm_only)
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    assert state["engine"] == "llama.cpp", state
    assert llama.PROFILE in json.dumps(state) + (run / "launch.json").read_text(encoding="utf-8"), state


def test_up_of_a_deprecated_profile_stops_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cat = load_catalog()
    old = next(p for p in cat.profiles.values() if p.status == "deprecated" and p.replaced_by
               and p.model == MODEL)
    run = tmp_path / "run"
    code = cli.main(["up", MODEL, "--profile-like", old.key, "--gpus", "2x3090", "--dir", str(run), "--no-start"],
                    provider=plenty_of_disk)
    err = capsys.readouterr().err
    assert code == 64 and f"profile {old.key} is deprecated" in err and f"--profile-like {old.replaced_by}" in err
    assert not run.exists()


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    offline_here(tmp_path, monkeypatch)
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_set_default_is_stored_and_used_by_pull_and_fits(state, capsys):
    assert cli.main(["profiles", "--set-default", MODEL, "vllm/dual"]) == 0
    stored = json.loads((state / "profile-defaults.json").read_text(encoding="utf-8"))
    assert stored == {"defaults": {MODEL: "vllm/dual"}}
    capsys.readouterr()
    assert cli.main(["pull", MODEL, "--gpus", "2x3090", "--json"], provider=plenty_of_disk) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["profile_like"] == "vllm/dual"
    assert f"note: {MODEL}: your default profile vllm/dual" in out.err
    assert cli.main(["fits", MODEL, "--gpus", "2x3090", "--json"], provider=plenty_of_disk) == 0
    out = capsys.readouterr()
    assert "vllm/dual" in out.out and "your default profile vllm/dual" in out.err
    # a default for more GPUs than the rig has is not used, and says so
    assert cli.main(["pull", MODEL, "--gpus", "1x3090", "--json"], provider=plenty_of_disk) in (0, 2, 3)
    out = capsys.readouterr()
    assert json.loads(out.out)["profile_like"] != "vllm/dual" and "needs 2 GPUs, the rig has 1" in out.err
    # --profile-like wins; 'none' forgets
    assert cli.main(["pull", MODEL, "--gpus", "2x3090", "--profile-like", "vllm/qwen-27b-dual-fast", "--json"],
                    provider=plenty_of_disk) in (0, 2, 3)
    assert json.loads(capsys.readouterr().out)["profile_like"] == "vllm/qwen-27b-dual-fast"
    assert cli.main(["profiles", "--set-default", MODEL, "none"]) == 0
    assert json.loads((state / "profile-defaults.json").read_text(encoding="utf-8")) == {"defaults": {}}


def test_set_default_refuses_another_models_profile(state, capsys):
    other = next(p.key for p in load_catalog().profiles.values() if p.model != MODEL)
    assert cli.main(["profiles", "--set-default", MODEL, other]) == 64
    assert "not " + MODEL in capsys.readouterr().err
    assert not (state / "profile-defaults.json").exists()


def test_profiles_model_prints_a_quick_start(state, capsys):
    cat = load_catalog()
    assert cli.main(["profiles", MODEL]) == 0
    out = capsys.readouterr().out
    single = cat.models[MODEL].serving_defaults["single"]
    assert out.startswith(f"{cat.models[MODEL].display_name} ({MODEL}): quick start")
    assert f"1 GPU: {single}" in out and "2 GPUs: " in out and "4 GPUs: " in out
    card = cat.profiles[single].reference_gpu
    assert f"club3090 pull {MODEL} --gpus 1x{card} --profile-like {single}" in out
    assert f"club3090 up {MODEL} --gpus 1x{card} --dir ./{MODEL} --profile-like {single}" in out
    assert cli.main(["profiles", "qwen3.6-40b-deckard"]) == 0      # a llama.cpp profile: priced by kv-calc
    assert "club3090 kv-calc llamacpp/" in capsys.readouterr().out
    assert cli.main(["profiles", MODEL, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["gpus"] for r in doc["rigs"]] == [1, 2, 4] and doc["rigs"][0]["profile"] == single


def test_kv_calc_answers_a_renamed_slug(state, capsys):
    cat = load_catalog()
    old, new = next((a, p.key) for p in cat.profiles.values() for a in p.aliases
                    if p.engine in cat.engines and cat.engines[p.engine].type == "vllm" and p.launchable)
    assert cli.main(["kv-calc", old, "--gpus", "2x3090", "--json"], provider=plenty_of_disk) in (0, 2)
    doc = json.loads(capsys.readouterr().out)
    assert new in json.dumps(doc)
