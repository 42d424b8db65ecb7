"""Submitting a capture bundle: classify it, route it, and file it only with consent.

Routes (docs/DESIGN.md, the Loop): a failure of the user's own environment gets a local verdict
and its next step; ``benign-cold-start`` is suppressed; ``unknown`` goes to the local review
queue (``<captures>/_review-queue/``), never to a public issue; every other class shows the
exact redacted payload and asks. With consent and the GitHub CLI on PATH the labels are
bootstrapped and the report is deduplicated: issues labelled ``loop:dedup-<hash>`` are listed, a
matching 7-tuple gets a ``+1`` comment, otherwise a new issue is created. Without ``gh``, or
when ``gh`` fails, the report is spooled to ``<captures>/_dedup-queue/<hash>.json`` and a
prefilled ``issues/new`` link (under 8 KB) is printed; nothing is sent. ``gh`` failures are
reported on ``out``, never raised.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote, urlencode

from club3090.edges.files import atomic_write_text, read_json_capped
from club3090.errors import InputError
from club3090.model.slug import sanitize_slug
from club3090.reports.capture import (
    DEDUP_FIELDS,
    Bundle,
    dedup_hash,
    dedup_key,
    dump_json,
    read_bundle,
)
from club3090.reports.classify import (
    ROUTE_FILE,
    ROUTE_LOCAL,
    ROUTE_REVIEW,
    ROUTE_SUPPRESSED,
    Classification,
    FingerprintTable,
    classify_points,
)
from club3090.reports.redact import Redactor

CLUB3090_ISSUES_REPO = "club3090/club3090"
MAX_URL_BYTES = 8000          # browsers and GitHub accept ~8 KB; keep clear of the edge
GH_TIMEOUT_S = 60.0
MAX_TITLE_CHARS = 200
ARCH_LABEL_MAX = 45           # "arch:" + 45 = GitHub's 50-character label limit
PROMPT = "Submit this report? [y/N] "
TRUNCATION_NOTE = ("\n\n_(body truncated to fit a URL; install the GitHub CLI `gh` and run "
                   "`club3090 pull --submit DIR` to send the full report)_\n")
REVIEW_QUEUE = "_review-queue"
DEDUP_QUEUE = "_dedup-queue"
QUEUE_ENTRY_LIMIT = 4 * 1024 * 1024
# label -> (colour, description) for `gh label create --force`
LABEL_COLOURS = {"loop:dedup": "ededed", "class": "d93f0b", "arch": "0e8a16"}

_DETECT: Any = object()       # "look for gh on PATH at call time", never at import


@dataclass(frozen=True, slots=True)
class Payload:
    title: str
    body: str
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubmitResult:
    # "local" | "suppressed" | "review-queued" | "declined" | "created" | "commented" | "spooled" | "gh-failed"
    action: str
    sent: bool                # True only when gh reported success
    failure_class: str
    dedup_hash: str
    payload: Payload
    issue: int | None = None  # the issue created or commented on
    url: str | None = None    # issue URL from gh, or the prefilled issues/new URL
    error: str | None = None  # what gh said when it failed
    spool: Path | None = None  # the review- or dedup-queue file written
    classification: Classification | None = None


def classify(bundle: Bundle, table: FingerprintTable | None = None) -> Classification:
    """Classify a bundle with the shipped failure table (or ``table``)."""
    if table is None:
        from club3090.reports.fingerprints import load_table
        table = load_table()
    manifest = bundle.manifest
    return classify_points(bundle.points, arch_family=manifest.get("arch_family"),
                           engine_version=manifest.get("engine_version"), gate_only=bundle.is_gate_only,
                           table=table)


def build_payload(bundle: Bundle, redactor: Redactor,
                  verdict: Classification | None = None) -> tuple[Payload, str, tuple[str, ...]]:
    """(payload, failure_class, dedup key) for a bundle; everything shown is redacted."""
    manifest = redactor.value(dict(bundle.manifest))
    gate = redactor.value(dict(bundle.gate)) if bundle.gate is not None else None
    verdict = verdict if verdict is not None else classify(bundle)
    failure_class = verdict.failure_class
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
        f"- class: `{failure_class}` ({verdict.tier}" + (f", rule `{verdict.rule}`" if verdict.rule else "") + ")",
        f"- error ({verdict.error_source or 'none'}): `{verdict.error_text.replace('`', chr(39))}`",
        f"- error fingerprint: `{verdict.fingerprint}`",
        f"- route as kv-calc bug: `{str(verdict.route_as_kv_calc_bug).lower()}`"
        + (f" (predicted-vs-actual delta {verdict.predicted_vs_actual_delta_mib} MiB)"
           if verdict.predicted_vs_actual_delta_mib is not None else ""),
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
           user: str | None = None, host: str | None = None, secrets: Iterable[str] = (),
           table: FingerprintTable | None = None, queue_root: Path | None = None) -> SubmitResult:
    """Classify a bundle and route it; for a filed class show the redacted report, ask, then file it.

    ``ask`` is ``input``-like (EOFError counts as "no"); ``gh`` is the path of the GitHub CLI
    (default: found on PATH at call time; None = not installed); ``run`` stands in for
    ``subprocess.run``. ``home``/``user``/``host`` override the redaction identity (tests);
    ``secrets`` are literal strings to redact (``Settings.redaction_secrets``). ``queue_root``
    holds ``_review-queue/`` and ``_dedup-queue/`` (default: the captures folder, two levels
    above the bundle). Raises ``InputError`` only for a malformed bundle (nothing is sent) and
    ``RedactionError`` when redaction cannot run (nothing is written or sent).
    """
    bundle = read_bundle(Path(bundle_dir))
    if gh is _DETECT:
        gh = shutil.which("gh")
    redactor = Redactor(home=home, user=user, host=host, secrets=secrets)
    verdict = classify(bundle, table)
    payload, failure_class, key = build_payload(bundle, redactor, verdict)
    sub = _Submission(bundle=bundle, verdict=verdict, payload=payload, failure_class=failure_class, key=key,
                      digest=dedup_hash(key), redactor=redactor, out=out,
                      queues=Path(queue_root) if queue_root is not None else bundle.path.parent.parent)
    _summary(sub)
    routed = _not_filed(sub)
    if routed is not None:
        return routed
    assert verdict.route == ROUTE_FILE
    _show(sub, gh)
    try:
        reply = ask(PROMPT)
    except (EOFError, KeyboardInterrupt):
        reply = ""
    if not isinstance(reply, str) or reply.lstrip()[:1] not in ("y", "Y"):
        sub.say("nothing sent")
        return sub.result("declined")
    if not gh:
        path = sub.spool(DEDUP_QUEUE)
        url = prefilled_issue_url(payload)
        sub.say(redactor.text(f"queued in {path} (nothing has been sent). To file it now, open:"))
        sub.say(url)
        return sub.result("spooled", url=url, spool=path)
    done = _file_with_gh(gh, run, payload, list(key), failure_class, sub.digest, sub.say)
    if done.action == "gh-failed":
        path = sub.spool(DEDUP_QUEUE)
        sub.say(redactor.text(f"queued in {path} for a later try"))
        return sub.result("gh-failed", url=done.url, error=done.error, spool=path)
    return SubmitResult(done.action, done.sent, failure_class, sub.digest, payload, issue=done.issue, url=done.url,
                        classification=verdict)


@dataclass(frozen=True, slots=True)
class _Submission:
    """One bundle on its way out: its classification, its redacted payload, and where queues live."""

    bundle: Bundle
    verdict: Classification
    payload: Payload
    failure_class: str
    key: tuple[str, ...]
    digest: str
    redactor: Redactor
    out: TextIO
    queues: Path

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def result(self, action: str, **kw: Any) -> SubmitResult:
        return SubmitResult(action, False, self.failure_class, self.digest, self.payload,
                            classification=self.verdict, **kw)

    def spool(self, queue: str) -> Path:
        return spool(self.queues / queue, self.digest, self.payload, self.key, self.failure_class,
                     self.bundle.manifest, self.redactor)


def _summary(sub: _Submission) -> None:
    manifest, redactor = sub.bundle.manifest, sub.redactor
    sub.say(redactor.text(f"bundle: {sub.bundle.path}"))
    sub.say(redactor.text(f"  slug={manifest.get('slug')} captured={manifest.get('utc_ts')} "
                          f"outcome={manifest.get('outcome')} class={sub.failure_class} dedup={sub.digest}"))
    sub.say(f"  submission_fingerprint={manifest.get('submission_fingerprint')}")
    if sub.verdict.error_text:
        sub.say(redactor.text(f"  error: {sub.verdict.error_text}"))


def _not_filed(sub: _Submission) -> SubmitResult | None:
    """The routes that file nothing: this machine's problem, a suppressed class, the review queue."""
    verdict = sub.verdict
    if verdict.route == ROUTE_LOCAL:
        sub.say(f"[loop] this is a problem of this machine ({verdict.environment}), not of the model or of "
                f"club3090: {verdict.next_step}. Nothing is filed.")
        return sub.result("local")
    if verdict.route == ROUTE_SUPPRESSED:
        sub.say(f"[loop] {sub.failure_class}: the server came up; nothing to report. Nothing is filed.")
        return sub.result("suppressed")
    if verdict.route == ROUTE_REVIEW:
        reason = (sub.bundle.gate or {}).get("abort_reason")
        path = sub.spool(REVIEW_QUEUE)
        sub.say(sub.redactor.text(f"[loop] class unknown{f' (stop: {reason})' if reason else ''}: kept for review "
                                  f"in {path}; it is never filed as a public issue."))
        return sub.result("review-queued", spool=path)
    return None


def _show(sub: _Submission, gh: str | None) -> None:
    """The exact text that would leave this machine, and where it would go."""
    if gh:
        sub.say(f"This exact text will be sent to github.com/{CLUB3090_ISSUES_REPO} with the GitHub CLI: "
                "a new issue, or a '+1' comment carrying the same text on an existing issue with "
                "the same dedup key.")
    else:
        sub.say(f"The GitHub CLI (gh) was not found: nothing will be sent; with your consent the report is "
                f"queued in {sub.redactor.text(str(sub.queues / DEDUP_QUEUE))} and a prefilled issue link is printed.")
    payload = sub.payload
    sub.say("----- title -----")
    sub.say(payload.title)
    sub.say("----- labels -----")
    sub.say(", ".join(payload.labels))
    sub.say("----- body -----")
    sub.out.write(payload.body)
    sub.say("----- end -----")


def spool(folder: Path, digest: str, payload: Payload, key: Sequence[str], failure_class: str,
          manifest: Mapping[str, Any], redactor: Redactor) -> Path:
    """Write (or count up) ``<folder>/<digest>.json``: the redacted report, its dedup key, and
    the submission fingerprints of every bundle that produced it."""
    path = folder / f"{digest}.json"
    entry: dict[str, Any] = {"schema": 1, "dedup_hash": digest, "dedup_key": list(key),
                             "failure_class": failure_class, "title": payload.title, "body": payload.body,
                             "labels": list(payload.labels), "count": 0, "submission_fingerprints": []}
    if path.is_file():
        try:
            old = read_json_capped(path, limit=QUEUE_ENTRY_LIMIT)
        except InputError:
            old = None
        if isinstance(old, dict) and old.get("dedup_key") == list(key):
            entry["count"] = int(old.get("count") or 0)
            entry["submission_fingerprints"] = [str(f) for f in old.get("submission_fingerprints") or []]
    fingerprint = str(manifest.get("submission_fingerprint") or "")
    if fingerprint not in entry["submission_fingerprints"]:
        entry["submission_fingerprints"].append(fingerprint)
        entry["count"] += 1
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, dump_json(redactor.value(entry)))
    return path


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

    for label in payload.labels:   # bootstrap: `issue create` refuses labels the repository lacks
        family = label.split(":", 1)[0] if not label.startswith("loop:dedup") else "loop:dedup"
        made = _gh(run, [gh, "label", "create", label, "--repo", CLUB3090_ISSUES_REPO, "--force",
                         "--color", LABEL_COLOURS.get(family, "ededed"),
                         "--description", "filed by club3090's Loop"], None)
        if isinstance(made, str):
            return _gh_failed(payload, failure_class, digest, say, f"gh label create {label}: {made}")
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
