"""Submitting a capture bundle: show the exact redacted payload, ask, then file it via ``gh``.

Nothing leaves the machine without an explicit ``y``/``Y`` answer. With consent and the
GitHub CLI on PATH, the report is deduplicated (SYSTEM.md section 13, F5): issues labelled
``loop:dedup-<hash>`` are listed, a matching 7-tuple gets a ``+1`` comment, otherwise a new
issue is created. Without ``gh`` a prefilled ``issues/new`` URL (under 8 KB) is printed and
nothing is sent. ``gh`` failures are reported on ``out``, never raised.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote, urlencode

from club3090.model.slug import sanitize_slug
from club3090.reports.capture import (
    DEDUP_FIELDS,
    Bundle,
    Redactor,
    dedup_hash,
    dedup_key,
    dump_json,
    read_bundle,
)

CLUB3090_ISSUES_REPO = "club3090/club3090"
MAX_URL_BYTES = 8000          # browsers and GitHub accept ~8 KB; keep clear of the edge
GH_TIMEOUT_S = 60.0
MAX_TITLE_CHARS = 200
ARCH_LABEL_MAX = 45           # "arch:" + 45 = GitHub's 50-character label limit
PROMPT = "Submit this report? [y/N] "
TRUNCATION_NOTE = ("\n\n_(body truncated to fit a URL; install the GitHub CLI `gh` and run "
                   "`club3090 pull --submit DIR` to send the full report)_\n")

_DETECT: Any = object()       # "look for gh on PATH at call time", never at import


@dataclass(frozen=True, slots=True)
class Payload:
    title: str
    body: str
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubmitResult:
    action: str               # "declined" | "created" | "commented" | "url" | "gh-failed"
    sent: bool                # True only when gh reported success
    failure_class: str
    dedup_hash: str
    payload: Payload
    issue: int | None = None  # the issue created or commented on
    url: str | None = None    # issue URL from gh, or the prefilled issues/new URL
    error: str | None = None  # what gh said when it failed


def classify(bundle: Bundle) -> str:
    """The minimal F2 classifier for what ``pull`` captures today (section 13, rows 8-9).

    A gate abort ``no-arch-row`` is ``kernel-unsupported`` (a registry gap maintainers can
    close); every other gate abort, and any [E] bundle until the Loop's full classifier
    lands, is ``unknown``.
    """
    gate = bundle.gate or {}
    reason = str(gate.get("abort_reason") or "")
    if bundle.is_gate_only and (reason == "no-arch-row" or reason.endswith("/no-arch-row")):
        return "kernel-unsupported"
    return "unknown"


def build_payload(bundle: Bundle, redactor: Redactor) -> tuple[Payload, str, tuple[str, ...]]:
    """(payload, failure_class, dedup key) for a bundle; everything shown is redacted."""
    manifest = redactor.value(dict(bundle.manifest))
    gate = redactor.value(dict(bundle.gate)) if bundle.gate is not None else None
    failure_class = classify(bundle)
    key = dedup_key(manifest, failure_class)
    digest = dedup_hash(key)
    arch = sanitize_slug(str(manifest.get("arch_family") or "unknown"))[:ARCH_LABEL_MAX].strip("-._")
    labels = (f"loop:dedup-{digest}", f"class:{failure_class}", f"arch:{arch or 'unknown'}")
    model = manifest.get("model_id") or manifest.get("model") or manifest.get("slug") or "model"
    what = (gate or {}).get("abort_reason") or manifest.get("outcome")
    title = f"[loop] {failure_class}: {model} ({what})"[:MAX_TITLE_CHARS]
    lines = [
        "Filed by `club3090 pull --submit` with the user's consent.",
        "",
        f"- model: `{model}`",
        f"- outcome: `{manifest.get('outcome')}`",
    ]
    if gate is not None:
        lines.append(f"- abort reason: `{gate.get('abort_reason')}`")
    lines += [
        f"- class: `{failure_class}`",
        f"- dedup hash: `{digest}`",
        f"- submission fingerprint: `{manifest.get('submission_fingerprint')}`",
        f"- captured: `{manifest.get('utc_ts')}` by club3090 `{manifest.get('club3090_commit')}`",
        "",
        "Dedup key (" + ", ".join(DEDUP_FIELDS) + "):",
        "",
        "```json",
        json.dumps({"dedup_key": list(key)}, ensure_ascii=False),
        "```",
        "",
        "manifest.json:",
        "",
        "```json",
        dump_json(manifest).rstrip("\n"),
        "```",
    ]
    if gate is not None:
        lines += ["", "pt1-gate.json:", "", "```json", dump_json(gate).rstrip("\n"), "```"]
    body = "\n".join(lines) + "\n"
    # re-redact the final text: whatever reached the bundle, this is the last line of defence
    payload = Payload(redactor.text(title), redactor.text(body), labels)
    return payload, failure_class, key


def submit(bundle_dir: Path, *, ask: Callable[[str], str], out: TextIO, gh: str | None = _DETECT,
           run: Callable[..., Any] = subprocess.run, home: str | None = None,
           user: str | None = None, host: str | None = None, secrets: Iterable[str] = ()) -> SubmitResult:
    """Show a bundle's redacted report, ask for consent, then file it (or print a URL).

    ``ask`` is ``input``-like (EOFError counts as "no"); ``gh`` is the path of the GitHub CLI
    (default: found on PATH at call time; None = not installed); ``run`` stands in for
    ``subprocess.run``. ``home``/``user``/``host`` override the redaction identity (tests);
    ``secrets`` are literal strings to redact (``Settings.redaction_secrets``).
    Raises ``InputError`` only for a malformed bundle; nothing is sent in that case.
    """
    bundle = read_bundle(Path(bundle_dir))
    if gh is _DETECT:
        gh = shutil.which("gh")
    redactor = Redactor(home=home, user=user, host=host, secrets=secrets)
    payload, failure_class, key = build_payload(bundle, redactor)
    digest = dedup_hash(key)
    manifest = bundle.manifest

    def say(text: str = "") -> None:
        out.write(text + "\n")

    say(redactor.text(f"bundle: {bundle.path}"))
    say(redactor.text(f"  slug={manifest.get('slug')} captured={manifest.get('utc_ts')} "
                      f"outcome={manifest.get('outcome')} class={failure_class} dedup={digest}"))
    say(f"  submission_fingerprint={manifest.get('submission_fingerprint')}")
    if gh:
        say(f"This exact text will be sent to github.com/{CLUB3090_ISSUES_REPO} with the GitHub CLI: "
            "a new issue, or a '+1' comment carrying the same text on an existing issue with "
            "the same dedup key.")
    else:
        say("The GitHub CLI (gh) was not found: nothing will be sent; a prefilled issue link "
            "will be printed for you to open.")
    say("----- title -----")
    say(payload.title)
    say("----- labels -----")
    say(", ".join(payload.labels))
    say("----- body -----")
    out.write(payload.body)
    say("----- end -----")

    try:
        reply = ask(PROMPT)
    except (EOFError, KeyboardInterrupt):
        reply = ""
    if not isinstance(reply, str) or reply.lstrip()[:1] not in ("y", "Y"):
        say("nothing sent")
        return SubmitResult("declined", False, failure_class, digest, payload)

    if not gh:
        url = prefilled_issue_url(payload)
        say("Open this link to file the report (nothing has been sent):")
        say(url)
        return SubmitResult("url", False, failure_class, digest, payload, url=url)
    return _file_with_gh(gh, run, payload, list(key), failure_class, digest, say)


def _file_with_gh(gh: str, run: Callable[..., Any], payload: Payload, key: list[str],
                  failure_class: str, digest: str, say: Callable[[str], None]) -> SubmitResult:
    listed = _gh(run, [gh, "issue", "list", "--repo", CLUB3090_ISSUES_REPO, "--label",
                       f"loop:dedup-{digest}", "--state", "all", "--json", "number,body",
                       "--limit", "100"], None)
    if isinstance(listed, str):
        return _gh_failed(payload, failure_class, digest, say, f"gh issue list: {listed}")
    try:
        issues = json.loads(listed.stdout or "[]")
        if not isinstance(issues, list):
            raise ValueError("not a list")
    except ValueError as exc:
        return _gh_failed(payload, failure_class, digest, say, f"gh issue list: unreadable answer ({exc})")

    match = next((i for i in issues if isinstance(i, Mapping) and isinstance(i.get("number"), int)
                  and body_dedup_key(str(i.get("body") or "")) == key), None)
    if match is not None:
        number = match["number"]
        done = _gh(run, [gh, "issue", "comment", str(number), "--repo", CLUB3090_ISSUES_REPO,
                         "--body-file", "-"], "+1: same dedup key, another report.\n\n" + payload.body)
        if isinstance(done, str):
            return _gh_failed(payload, failure_class, digest, say, f"gh issue comment: {done}")
        url = _first_url(done.stdout)
        say(f"+1 added to issue #{number} (dedup {digest})" + (f": {url}" if url else ""))
        return SubmitResult("commented", True, failure_class, digest, payload, issue=number, url=url)

    argv = [gh, "issue", "create", "--repo", CLUB3090_ISSUES_REPO, "--title", payload.title,
            "--body-file", "-"]
    for label in payload.labels:
        argv += ["--label", label]
    done = _gh(run, argv, payload.body)
    if isinstance(done, str):
        return _gh_failed(payload, failure_class, digest, say, f"gh issue create: {done}")
    url = _first_url(done.stdout)
    number = int(m.group(1)) if url and (m := re.search(r"/issues/(\d+)", url)) else None
    say(f"issue created (dedup {digest})" + (f": {url}" if url else ""))
    return SubmitResult("created", True, failure_class, digest, payload, issue=number, url=url)


def _gh(run: Callable[..., Any], argv: list[str], stdin_text: str | None) -> Any:
    """Run gh; the completed process, or a one-line reason it failed."""
    kwargs: dict[str, Any] = {"capture_output": True, "text": True, "timeout": GH_TIMEOUT_S,
                              "check": False}
    if stdin_text is None:
        kwargs["stdin"] = subprocess.DEVNULL
    else:
        kwargs["input"] = stdin_text
    try:
        proc = run(argv, **kwargs)
    except subprocess.TimeoutExpired:
        return f"timed out after {GH_TIMEOUT_S:.0f} s"
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return f"could not run gh ({exc})"
    if getattr(proc, "returncode", 1) != 0:
        err = " ".join(str(getattr(proc, "stderr", "") or "").split())[:300]
        return f"exit {getattr(proc, 'returncode', '?')}" + (f": {err}" if err else "")
    return proc


def _gh_failed(payload: Payload, failure_class: str, digest: str, say: Callable[[str], None],
               error: str) -> SubmitResult:
    url = prefilled_issue_url(payload)
    say(f"gh failed, nothing was filed: {error}")
    say("You can file the same report by hand with this link:")
    say(url)
    return SubmitResult("gh-failed", False, failure_class, digest, payload, url=url, error=error)


def _first_url(text: Any) -> str | None:
    match = re.search(r"https://\S+", str(text or ""))
    return match.group(0) if match else None


_FENCED_JSON = re.compile(r"```json[ \t]*\n(.*?)\n```", re.DOTALL)


def body_dedup_key(body: str) -> list[str] | None:
    """The dedup 7-tuple an issue body carries (the first fenced JSON with ``dedup_key``)."""
    for block in _FENCED_JSON.findall(body):
        try:
            data = json.loads(block)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("dedup_key"), list):
            return [str(v) for v in data["dedup_key"]]
    return None


def prefilled_issue_url(payload: Payload, *, repo: str = CLUB3090_ISSUES_REPO,
                        limit: int = MAX_URL_BYTES) -> str:
    """A github.com ``issues/new`` link under ``limit`` bytes; the body is cut with a note."""
    base = f"https://github.com/{repo}/issues/new?"

    def build(body: str) -> str:
        query = {"title": payload.title, "labels": ",".join(payload.labels), "body": body}
        return base + urlencode(query, quote_via=quote)

    url = build(payload.body)
    if len(url) <= limit:
        return url
    lo, hi = 0, len(payload.body)   # longest prefix that still fits with the note
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(build(payload.body[:mid] + TRUNCATION_NOTE)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    url = build(payload.body[:lo] + TRUNCATION_NOTE)
    if len(url) > limit:  # even the title and labels alone are too long
        url = build(TRUNCATION_NOTE)[:limit]
    return url
