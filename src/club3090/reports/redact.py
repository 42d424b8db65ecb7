"""Redaction: what may leave this machine in a bundle, a receipt or a submitted payload.

Rules (docs/DESIGN.md, capture bundles): home -> ``~``, ``/root`` -> ``~``, host -> ``<HOST>``,
user -> ``<USER>`` (whole words), values after ``HF_TOKEN=`` / ``HUGGING_FACE_HUB_TOKEN=`` /
``api_key=`` / ``'api_key': [...]`` (vLLM's spelling, the whole list), ``--api-key VALUE`` /
``--api-key=VALUE`` and after ``Authorization: Bearer`` -> ``<REDACTED>``, URL user-info
(``https://user:pass@host``) -> ``<credentials>``, ``hf_`` + 30 or more
alphanumerics -> ``hf_<REDACTED>``, paths under ``/opt``, ``/mnt``, ``/data`` -> ``<PATH>``,
relative paths (``./x``, ``../x``) and the local folders a run was pointed at -> ``<PATH>``.

Redaction fails closed: when this machine's identity cannot be read, or a value cannot be
scrubbed, ``RedactionError`` is raised and the caller writes or sends nothing.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from club3090.errors import RedactionError
from club3090.model.slug import sanitize_slug
from club3090.settings import redact_url_credentials

REDACTED = "<REDACTED>"
LOCAL_PATH = "<PATH>"
_PLACEHOLDER_WORDS = frozenset({"user", "host", "path", "redacted"})
_SECRET_KEYS = frozenset({"hf_token", "hugging_face_hub_token", "api_key", "apikey", "authorization"})
_SCHEMA_KEY = re.compile(r"[a-z][a-z0-9_]*\Z")
_ASSIGNED_SECRET = re.compile(
    r"(?i)(hugging_face_hub_token|hf_token|api[_-]?key)(\s*[\"']?\s*[=:]\s*[\"']?)([^\s\"'&;,\[][^\s\"'&;,]*)")
# vLLM logs its args as ``'api_key': ['sk-a', 'sk-b']`` (or ``api_key=[...]``): the whole list goes
_SECRET_LIST = re.compile(r"(?i)(api[_-]?key[\"']?\s{0,8}[=:]\s{0,8})\[[^\]\n]{0,4096}\]")
# ``--api-key VALUE`` / ``--api-key=VALUE`` (vLLM's and llama.cpp's flag), ``--hf-token`` likewise
_SECRET_FLAG = re.compile(r"(?i)(--(?:api-key|hf-token|token)(?:=|\s{1,8}))([\"']?)[^\s\"']+")
_AUTH_BEARER = re.compile(r"(?i)(authorization\s*:\s*bearer\s+)[^\s\"']+")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_HF_TOKEN = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")
_ROOT_HOME = re.compile(r"(?<![\w.~/-])/root(?![\w.-])")
_PATH_TAIL = r"[^\s\"'`$<>|;,:)\]}]*"
_DATA_PATH = re.compile(r"(?<![\w.~-])/(?:opt|mnt|data)(?![\w.-])" + _PATH_TAIL)
# "./my-project/model", "../models/x": a folder name on this machine, meaningless elsewhere
_RELATIVE_PATH = re.compile(r"(?<![\w.~/-])\.{1,2}/" + _PATH_TAIL)
_MAX_DEPTH = 64


def _identity(what: str, lookup: Callable[[], object], hint: str) -> str:
    try:
        value = lookup()
    except Exception as exc:
        raise RedactionError(f"cannot read this machine's {what} to redact it ({type(exc).__name__}: "
                             f"{exc}); nothing was written. {hint}") from exc
    if not value:
        raise RedactionError(f"this machine's {what} is empty, so it cannot be redacted; nothing was "
                             f"written. {hint}")
    return str(value)


def _local_forms(path: str) -> set[str]:
    """The spellings a local folder can take in a log or a payload."""
    raw = str(path).strip()
    if raw in ("", ".", "..", "/", "~"):
        return set()
    forms = {raw.rstrip("/") or raw}
    bare = raw
    while bare.startswith("./"):
        bare = bare[2:]
    forms.add(bare.rstrip("/"))
    try:
        forms.add(os.path.abspath(raw))
        forms.add(os.path.realpath(raw))
    except (OSError, ValueError) as exc:
        raise RedactionError(f"cannot resolve the local folder {raw!r} to redact it ({exc}); "
                             "nothing was written") from exc
    slug = sanitize_slug(bare)
    if slug != "model":
        forms.add(slug)
    forms.add(os.path.basename(bare.rstrip("/")))
    return {f for f in forms if len(f) >= 3 and f not in ("/", "~")}


class Redactor:
    """Redaction rules bound to one machine's identity; ``redact`` builds one per call.

    ``None`` for ``home``/``user``/``host`` means "this machine's" (read now; a failure raises
    ``RedactionError``); ``""`` switches that rule off. ``secrets`` are literal strings to hide
    (the caller passes ``Settings.redaction_secrets``); ``local_paths`` are local folders the
    run was pointed at (a model folder given as ``DIR``), hidden in every spelling.
    """

    def __init__(self, *, home: str | os.PathLike[str] | None = None, user: str | None = None,
                 host: str | None = None, secrets: Iterable[str] = (),
                 local_paths: Iterable[str | os.PathLike[str]] = ()) -> None:
        if home is None:
            home = _identity("home folder", lambda: str(Path.home()), "Set HOME to your home folder.")
        if user is None:
            user = _identity("user name", getpass.getuser, "Set USER to your login name.")
        if host is None:
            host = _identity("host name", socket.gethostname, "Check that `hostname` works.")
        self._secrets = sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True)
        homes: set[str] = set()
        if home:
            raw = str(home).rstrip("/")
            homes = {raw, os.path.realpath(raw) or raw} - {"", "/"}
        self._homes = [re.compile(re.escape(h) + r"(?![\w.-])") for h in sorted(homes, key=len, reverse=True)]
        locals_: set[str] = set()
        for path in local_paths:
            locals_ |= _local_forms(os.fspath(path))
        self._locals = [re.compile(r"(?<![\w.-])" + re.escape(p) + r"(?![\w.-])")
                        for p in sorted(locals_, key=len, reverse=True)]
        hosts: set[str] = set()
        if host:
            hosts = {host, host.split(".")[0]}
        hosts = {h for h in hosts if len(h) >= 2 and h.lower() not in _PLACEHOLDER_WORDS | {"localhost"}}
        self._hosts = [re.compile(r"(?i)(?<![A-Za-z0-9_])" + re.escape(h) + r"(?![A-Za-z0-9_])")
                       for h in sorted(hosts, key=len, reverse=True)]
        self._user = None
        if user and len(user) >= 2 and user != "root" and user.lower() not in _PLACEHOLDER_WORDS:
            self._user = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(user) + r"(?![A-Za-z0-9_])")

    def with_local(self, paths: Iterable[str | os.PathLike[str]]) -> "Redactor":
        """This redactor, also hiding ``paths`` (local folders) in every spelling."""
        import copy

        forms: set[str] = set()
        for path in paths:
            forms |= _local_forms(os.fspath(path))
        extra = [re.compile(r"(?<![\w.-])" + re.escape(p) + r"(?![\w.-])") for p in forms]
        out = copy.copy(self)
        out._locals = sorted([*self._locals, *extra], key=lambda rx: len(rx.pattern), reverse=True)
        return out

    def text(self, s: str, *, names: bool = True) -> str:
        try:
            return self._text(s, names=names)
        except (TypeError, ValueError, re.error, RecursionError) as exc:
            raise RedactionError(f"redaction failed ({type(exc).__name__}); nothing was written") from exc

    def _text(self, s: str, *, names: bool) -> str:
        for secret in self._secrets:
            s = s.replace(secret, REDACTED)
        s = _SECRET_LIST.sub(lambda m: m.group(1) + f"['{REDACTED}']", s)
        s = _SECRET_FLAG.sub(lambda m: m.group(1) + m.group(2) + REDACTED, s)
        s = _ASSIGNED_SECRET.sub(lambda m: m.group(1) + m.group(2) + REDACTED, s)
        s = redact_url_credentials(s)
        s = _AUTH_BEARER.sub(lambda m: m.group(1) + REDACTED, s)
        s = _BEARER.sub(lambda m: m.group(1) + REDACTED, s)
        s = _HF_TOKEN.sub("hf_" + REDACTED, s)
        for local in self._locals:   # before home: "~/proj/model" must not survive as "~/<...>"
            s = local.sub(LOCAL_PATH, s)
        for home in self._homes:
            s = home.sub("~", s)
        s = _ROOT_HOME.sub("~", s)
        s = _DATA_PATH.sub(LOCAL_PATH, s)
        s = _RELATIVE_PATH.sub(LOCAL_PATH, s)
        if names:
            for host in self._hosts:
                s = host.sub("<HOST>", s)
            if self._user is not None:
                s = self._user.sub("<USER>", s)
        return s

    def value(self, obj: Any) -> Any:
        """A redacted copy of a JSON-shaped value; ``RedactionError`` if it cannot be scrubbed."""
        try:
            return self._value(obj, 0)
        except RedactionError:
            raise
        except (TypeError, ValueError, re.error, RecursionError) as exc:
            raise RedactionError(f"redaction failed ({type(exc).__name__}); nothing was written") from exc

    def _value(self, obj: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise RedactionError(f"value nested deeper than {_MAX_DEPTH} levels; nothing was written")
        if isinstance(obj, str):
            return self._text(obj, names=True)
        if isinstance(obj, Mapping):
            out = {}
            for key, val in obj.items():
                key = str(key)
                if key.lower() in _SECRET_KEYS and isinstance(val, str) and val:
                    val = REDACTED
                # snake_case keys are our schema names: keep them readable even if a user or
                # host happens to be called "model"; secrets and paths are still scrubbed
                new_key = self._text(key, names=not _SCHEMA_KEY.match(key))
                out[new_key] = self._value(val, depth + 1)
            return out
        if isinstance(obj, (list, tuple)):
            return [self._value(v, depth + 1) for v in obj]
        if obj is None or isinstance(obj, (bool, int, float)):
            return obj
        raise RedactionError(f"cannot redact a {type(obj).__name__}; nothing was written")


def redact(obj: Any, *, home: str | os.PathLike[str] | None = None, user: str | None = None,
           host: str | None = None, secrets: Iterable[str] = (),
           local_paths: Iterable[str | os.PathLike[str]] = ()) -> Any:
    """A copy of a JSON-shaped value with every string redacted (see the module docstring)."""
    return Redactor(home=home, user=user, host=host, secrets=secrets, local_paths=local_paths).value(obj)
