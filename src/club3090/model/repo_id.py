"""Exact validation of Hub repo ids and revisions, before any path or URL is built from them.

A reference that is not exactly valid is refused, never repaired: ``org/name\\n`` is not
``org/name``, and the revision ``..`` must not resolve (through URL normalisation) to the
default branch. Each function returns None when the text is valid, else why it is not.
"""

from __future__ import annotations

import re

MAX_PART = 96                 # huggingface_hub's validate_repo_id: each part 1-96 characters
MAX_REVISION = 255
MAX_SOURCE = 4096             # PATH_MAX: longer is neither a folder nor a repo reference

# huggingface_hub's rules (ASCII only): each part starts and ends with a letter, digit or '_';
# inside also '.' and '-'; no '--' or '..'; no '.git' suffix.
_PART = rf"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]{{0,{MAX_PART - 2}}}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"{_PART}/{_PART}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_REVISION_CHARS = re.compile(r"[A-Za-z0-9._/\-+=,]+")


def repo_id_problem(text: str) -> str | None:
    """None for an exact ``org/name`` repo id, else the reason it is not one."""
    if _CONTROL.search(text):
        return f"{text!r} contains a control character"
    if len(text) > 2 * MAX_PART + 1:
        return f"a repo id is at most {2 * MAX_PART + 1} characters, this one has {len(text)}"
    if not _REPO_ID.fullmatch(text):
        return f"{text!r} is not a Hugging Face repo id (org/name: letters, digits, '_', '.', '-')"
    if ".." in text or "--" in text or text.endswith(".git"):
        return f"{text!r} is not a Hugging Face repo id ('..', '--' and a '.git' suffix are not allowed)"
    return None


def revision_problem(revision: str) -> str | None:
    """None for a revision that is a plain branch, tag, ``refs/...`` name or commit, else why not.

    The rules are git's ref-name rules, narrowed to the characters Hub refs use."""
    if _CONTROL.search(revision):
        return f"revision {revision!r} contains a control character"
    if not revision:
        return "the revision is empty"
    if len(revision) > MAX_REVISION:
        return f"a revision is at most {MAX_REVISION} characters, this one has {len(revision)}"
    if not _REVISION_CHARS.fullmatch(revision):
        return f"revision {revision!r} has characters a branch, tag or commit cannot have"
    parts = revision.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") or p.endswith(".lock") for p in parts) \
            or ".." in revision or revision.endswith("."):
        return f"revision {revision!r} is not a branch, tag or commit name"
    return None


def source_problem(source: str) -> str | None:
    """Checks on a raw SOURCE argument (a repo reference or a folder) before anything trims it."""
    if len(source) > MAX_SOURCE:
        return f"the source is {len(source)} characters long; at most {MAX_SOURCE}"
    if _CONTROL.search(source):
        return f"{source!r} contains a control character (a stray newline or tab?)"
    return None


# --- values a Hub listing names things with ----------------------------------------------------
MAX_FILE_NAME = 1024           # a repo path; the Hub's own limit is lower
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def shown(value: object) -> str:
    """A value from outside for a message: escaped (``repr``) and cut to 120 characters."""
    text = value if isinstance(value, str) else repr(value)
    return ascii(text[:120]) + ("..." if len(text) > 120 else "")


def file_name_problem(name: object) -> str | None:
    """None for a relative POSIX path with no ``..``/``.``/empty part, no absolute or drive part,
    no backslash and no control character; else why not (the name shown escaped)."""
    if not isinstance(name, str) or not name:
        return f"file name {shown(name)} is not a non-empty string"
    if len(name) > MAX_FILE_NAME:
        return f"file name {shown(name)} is over {MAX_FILE_NAME} characters"
    if _CONTROL.search(name) or "\\" in name:
        return f"file name {shown(name)} contains a control character or a backslash"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return f"file name {shown(name)} is an absolute path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return f"file name {shown(name)} has an empty, '.' or '..' part"
    return None


def oid_problem(oid: object) -> str | None:
    """None for an LFS oid (a sha256: 64 lowercase hex characters), else why not."""
    if isinstance(oid, str) and _HEX64.fullmatch(oid):
        return None
    return f"LFS sha256 {shown(oid)} is not 64 hex characters"


def commit_problem(commit: object) -> str | None:
    """None for a commit id (40 lowercase hex characters), else why not."""
    if isinstance(commit, str) and _HEX40.fullmatch(commit):
        return None
    return f"commit {shown(commit)} is not 40 hex characters"
