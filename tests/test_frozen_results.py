"""Frozen results end to end (issue 23 item 3): ``up``, ``swap`` and the cluster path build their
result once from facts; nothing under ``pipeline/`` or ``engines/`` mutates a result or appends a
printed line, and only ``cli/`` renders facts into lines."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from club3090.outcome import Outcome
from club3090.pipeline import up_facts
from club3090.pipeline.swap import SwapResult
from club3090.pipeline.up_facts import UpResult

SRC = Path(__file__).resolve().parents[1] / "src" / "club3090"


def mutations(source: str) -> list[str]:
    """Where ``source`` mutates a result object or a printed ``lines`` list: ``x.lines.append(...)``
    (``+=``, ``extend``), or an assignment to an attribute of a name holding a result."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "extend", "insert") \
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "lines":
            found.append(f"line {node.lineno}: .lines.{node.func.attr}")
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(t, ast.Attribute) and (t.attr == "lines" or (
                        isinstance(t.value, ast.Name) and "result" in t.value.id.lower())):
                    found.append(f"line {node.lineno}: {ast.unparse(t)} =")
    return found


def test_nothing_under_pipeline_or_engines_mutates_a_result():
    bad = {str(p.relative_to(SRC)): hits for sub in ("pipeline", "engines") for p in sorted((SRC / sub).rglob("*.py"))
           if (hits := mutations(p.read_text(encoding="utf-8")))}
    assert bad == {}


@pytest.mark.parametrize("source", [
    "result.lines.append('x')\n", "self.up.lines += ['x']\n", "result.outcome = 1\n",
    "result.outcome, result.failure = 1, 2\n", "up_result.state = {}\n", "r.lines.extend([])\n"])
def test_the_check_catches_each_kind_of_mutation(source):
    assert mutations(source), source


def test_a_local_fact_list_is_not_a_mutation():
    assert mutations("log.add(fact)\nfacts.append(fact)\nstate.update(x=1)\n") == []


def test_results_are_frozen_and_carry_facts_not_lines():
    up = UpResult(Outcome.OK)
    swap = SwapResult(Outcome.OK, "a/b", "vllm/minimal")
    for result in (up, swap):
        with pytest.raises(dataclasses.FrozenInstanceError):
            result.outcome = Outcome.FAILED  # type: ignore[misc]
        assert not hasattr(result, "lines")
    assert "lines" not in up.to_json() and "lines" not in swap.to_json()


def test_every_fact_is_frozen_and_rendered_by_the_cli():
    from club3090.cli.commands import _up_render
    from club3090.edges.boot import WarmUp
    from club3090.edges.launchers.process import PortHolder
    from club3090.gate.cliffs import Cliff
    from club3090.pipeline.boot_receipt import BootReceipt
    from club3090.pipeline.pull import PullResult

    kinds = [getattr(up_facts, name) for name in up_facts.__all__
             if dataclasses.is_dataclass(getattr(up_facts, name)) and name not in ("FactLog", "UpResult")]
    # the steps whose own frozen value is the fact: the gate's answer, a cliff, the port's holder, the
    # warm-up, the receipt
    kinds += [PullResult, Cliff, PortHolder, WarmUp, BootReceipt]
    assert kinds and all(k.__dataclass_params__.frozen for k in kinds)  # type: ignore[attr-defined]
    rendered = set(_up_render._render.registry)
    assert set(kinds) <= rendered, set(kinds) - rendered
    # a template fact renders through its template, not a second renderer registered after it
    for kind in _up_render._SAID:
        assert _up_render._render.registry[kind].__qualname__ == "_filled.<locals>.render", kind


def test_the_one_template_facts_fill_in_their_own_fields():
    from pathlib import Path

    from club3090.cli.commands._up_render import lines

    assert lines(up_facts.Ready(12.4, "http://127.0.0.1:8000")) == ["[up] ready after 12s at http://127.0.0.1:8000"]
    assert lines(up_facts.EmitOnly(3, "a/b", "0123456789abcdef0123", "/hf/hub")) == [
        "[up] weights not downloaded, nothing started (--emit-only): 3 files of a/b@0123456789ab would go into "
        "/hf/hub"]
    assert lines(up_facts.NotStarted(Path("out/run"))) == [
        "[up] not started (--no-start); start it with `club3090 up` again, `docker compose -f "
        "out/run/compose.yml up -d`, or out/run/serve.sh"]
    assert lines(up_facts.PricedOnReference("RTX {3090}", 2)) == [
        "[swap] note: no GPU named or detected for 2 rank(s): priced on the profile's reference GPU (RTX {3090} x 2); "
        "pass --gpus to price your rig"]
    assert lines(up_facts.ReceiptSkipped()) == ["[up] no receipt: llama.cpp start-up logs are not parsed into "
                                                "receipts yet; launch.json holds the prediction"]
    no_fit = lines(up_facts.EngineNoFit("llama.cpp", "a/b-GGUF", "1x RTX 3090", "weights over VRAM"))
    assert no_fit[0] == "[up] a/b-GGUF does not fit on 1x RTX 3090 (llama.cpp, estimated): weights over VRAM"
    assert no_fit[1].endswith("`club3090 kv-calc a/b-GGUF --quant QUANT` shows the breakdown")


def test_the_tool_skip_line_names_the_missing_flag_and_is_silent_for_the_users_own_skip():
    from club3090.cli.commands._up_render import lines

    assert lines(up_facts.ToolsSkipped(False, "--jinja")) == ["[up] tool calls not verified: the launch has no --jinja"]
    assert lines(up_facts.ToolsSkipped(True, None)) == []


def test_a_fact_log_builds_the_result_once_in_order():
    seen: list[up_facts.Fact] = []
    log = up_facts.FactLog(seen.append)
    log.add(up_facts.Ready(3.0, "http://x"))
    log.add(up_facts.Serving("http://x", "m", "/d", True))
    result = log.result(Outcome.OK, {"state": "running"})
    assert result.facts == tuple(seen) and result.ok and result.state == {"state": "running"}


def test_verify_names_the_servers_own_flags_and_the_real_skip_reason():
    from club3090.engines.llamacpp import LlamaCppEngine
    from club3090.validate.verify import VLLM_HINTS, hinted

    vllm_detail = f"no tool_calls (finish_reason stop; content ''); {VLLM_HINTS.tools}"
    llama = hinted(vllm_detail, LlamaCppEngine.verify_hints)
    assert "--jinja" in llama and "--enable-auto-tool-choice" not in llama and "--tool-call-parser" not in llama
    assert hinted(f"or no {VLLM_HINTS.reasoning})", LlamaCppEngine.verify_hints) == "or no --reasoning-format)"
    assert hinted(vllm_detail, VLLM_HINTS) == vllm_detail
