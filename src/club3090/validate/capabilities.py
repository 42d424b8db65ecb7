"""The capabilities smoke (issue 28 item 6): after the floor (plain chat, streaming) is green, each
optional capability the launch positively declares is probed with one small, bounded request, and
reported ``green`` (it works), ``red`` (declared but broken, with why) or ``skipped`` (with why: not
declared, or nothing to probe it with). A capability is declared by the server's own flag:

=====================  =============================================  ===========================
capability             vLLM                                           llama-server
=====================  =============================================  ===========================
tool-call              ``--enable-auto-tool-choice``                  ``--jinja``
reasoning-streaming    ``--reasoning-parser P``                       ``--reasoning-format F``
                                                                      (not ``none``, nor with
                                                                      ``--reasoning off``)
structured-output      ``--guided-decoding-backend`` /                -
                       ``--structured-outputs-config``
vision                 ``--limit-mm-per-prompt`` (images > 0)         ``--mmproj``
long-context           ``--max-model-len N``, N >= 32768              ``-c`` / ``--ctx-size N``
                                                                      (``--n_ctx N``: llama-cpp-python)
=====================  =============================================  ===========================

The probes are verify's (``validate.verify``: the tool call, the vision pixel) and verify-stress's
(``validate.stress.long_prompt``, capped at ``LONG_SMOKE_TOKENS``), plus two of its own: a streamed
answer with thinking on must carry reasoning, and a JSON-schema answer must parse to the schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from club3090.argv import flag_index, flag_value
from club3090.edges import boot
from club3090.edges.boot import GREEN, OPTIONAL, RED, SKIPPED, SmokeReport
from club3090.edges.openai_client import Http, OpenAIClient
from club3090.validate.hints import VLLM_HINTS, ServerHints
from club3090.validate.verify import FAIL, PASS, SKIP, THINK_PROMPT, check_tool_call, hinted, probe_vision

__all__ = ["LONG_CONTEXT_MIN", "LONG_SMOKE_TOKENS", "declared", "served_context", "smoke", "smoke_capabilities"]

LONG_CONTEXT_MIN = 32_768         # a launch serving at least this context declares long context
LONG_SMOKE_TOKENS = 8_192         # the long-context probe's prompt, at most (the smoke stays small)
SMOKE_DEADLINE_S = 600.0          # every capability probe together
_FLAGS: Mapping[str, tuple[str, ...]] = {
    "tool-call": ("--enable-auto-tool-choice", "--jinja"),
    "reasoning-streaming": ("--reasoning-parser", "--reasoning-format"),
    "structured-output": ("--guided-decoding-backend", "--structured-outputs-config"),
    "vision": ("--limit-mm-per-prompt", "--mmproj"),
}
_CONTEXT_FLAGS = ("--max-model-len", "-c", "--ctx-size", "--n_ctx")     # --n_ctx: llama-cpp-python's server
CITY_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
               "additionalProperties": False}


def _negative(flag: str, argv: Sequence[str]) -> bool:
    """A declaring flag that says "no": ``--reasoning-format none``, ``--reasoning off``, no images."""
    value = flag_value(argv, flag) or ""
    if flag == "--reasoning-format":
        return value.lower() == "none" or (flag_value(argv, "--reasoning") or "").lower() == "off"
    if flag == "--limit-mm-per-prompt":
        try:
            images = json.loads(value).get("image", 1) if value.strip().startswith("{") else \
                int(dict(p.split("=", 1) for p in value.split(",") if "=" in p).get("image", "1"))
        except (ValueError, AttributeError, TypeError):
            return False
        return images == 0
    return False


def declared(argv: Sequence[str]) -> dict[str, str]:
    """The optional capabilities ``argv`` (a vLLM or llama-server command line) declares: cap -> the
    flag that declares it (``--max-model-len 131072`` for long context)."""
    out = {cap: flag for cap, flags in _FLAGS.items() for flag in flags
           if flag_index(argv, flag) is not None and not _negative(flag, argv)}
    served = served_context(argv)
    if served is not None and served[1] >= LONG_CONTEXT_MIN:
        out["long-context"] = f"{served[0]} {served[1]}"
    return out


def served_context(argv: Sequence[str]) -> tuple[str, int] | None:
    """(the flag, the context) ``argv`` serves at, when it names one."""
    for flag in _CONTEXT_FLAGS:
        value = flag_value(argv, flag) or ""
        if value.isdigit():
            return flag, int(value)
    return None


def _reasoning_stream(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "messages": [{"role": "user", "content": THINK_PROMPT}], "max_tokens": 256,
                     "temperature": 0, "chat_template_kwargs": {"enable_thinking": True}}, stream=True)
    if r.error is not None:
        return FAIL, r.error
    if not r.reasoning.strip():
        return FAIL, f"a streamed answer with thinking on carried no reasoning_content ({r.chunks} chunks)"
    return PASS, f"{len(r.reasoning)} reasoning chars streamed in {r.chunks} chunks"


def _structured(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "max_tokens": 64, "temperature": 0,
                     "chat_template_kwargs": {"enable_thinking": False},
                     "messages": [{"role": "user", "content": "Name the capital of France as JSON."}],
                     "response_format": {"type": "json_schema",
                                         "json_schema": {"name": "city", "schema": CITY_SCHEMA}}})
    if r.error is not None:
        return FAIL, r.error
    try:
        doc = json.loads(r.content)
    except ValueError:
        return FAIL, f"the answer to a JSON-schema request is not JSON: {r.content.strip()[:60]!r}"
    if not (isinstance(doc, dict) and isinstance(doc.get("city"), str)):
        return FAIL, f"the JSON does not match the schema (an object with a string 'city'): {r.content[:60]!r}"
    return PASS, f"schema-valid JSON {r.content.strip()[:40]}"


def _vision(client: OpenAIClient, model: str) -> tuple[str, str]:
    seen = probe_vision(client, model)
    if seen == "supported":
        return PASS, "a one-pixel red image was called red"
    if seen == "answered-unverified":
        return FAIL, "an image was accepted but not described (its colour missing): the image may be dropped"
    return FAIL, f"an image request was {'refused' if seen == 'unsupported' else 'not answered'}"


def _probes(context: int | None) -> Mapping[str, Callable[[OpenAIClient, str], tuple[str, str]]]:
    from club3090.validate.stress import long_prompt

    return {"tool-call": check_tool_call, "reasoning-streaming": _reasoning_stream, "structured-output": _structured,
            "vision": _vision,
            "long-context": lambda client, model: long_prompt(client, model, context, top=LONG_SMOKE_TOKENS)}


def smoke_capabilities(client: OpenAIClient, model: str, argv: Sequence[str], *, context: int | None = None,
                       hints: ServerHints = VLLM_HINTS) -> dict[str, dict[str, Any]]:
    """cap -> {status: green | red | skipped, error (why, for red and skipped), declared_by}: each
    declared capability probed once; a probe's exception is a red result, never a crash."""
    wanted = declared(argv)
    served = served_context(argv)
    probes = _probes(context or (served[1] if served is not None else None))
    out: dict[str, dict[str, Any]] = {}
    for cap in OPTIONAL:
        flag = wanted.get(cap)
        if flag is None:
            out[cap] = {"status": SKIPPED, "error": "not declared by the launch", "declared_by": None}
            continue
        try:
            status, detail = probes[cap](client, model)
        except Exception as exc:  # noqa: BLE001 - a probe failure is a red result
            status, detail = FAIL, f"{type(exc).__name__}: {exc}"
        word = {PASS: GREEN, FAIL: RED, SKIP: SKIPPED}[status]
        said = hinted(client.scrub(detail) or detail, hints)
        out[cap] = {"status": word, "error": None if word == GREEN else f"{said} (declared by {flag})",
                    "detail": said, "declared_by": flag}
    return out


def smoke(endpoint: str, model: str, argv: Sequence[str], *, http: Http, context: int | None = None,
          hints: ServerHints = VLLM_HINTS, deadline_s: float = SMOKE_DEADLINE_S) -> SmokeReport:
    """The whole smoke of a started server: the floor, then (when it is green) every capability
    ``argv`` declares, within ``deadline_s`` for them all."""
    floor = boot.smoke(endpoint, model, http=http)
    if not floor.floor_green:
        return floor
    client = OpenAIClient(f"{endpoint.rstrip('/')}/v1", timeout=boot.SMOKE_TIMEOUT_S * 4, http=http,
                          deadline_s=deadline_s)
    return floor.with_capabilities(smoke_capabilities(client, model, argv, context=context, hints=hints))
