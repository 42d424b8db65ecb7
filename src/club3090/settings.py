"""Settings read once from flags and the environment by the CLI, then passed down explicitly."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
UPSTREAM_URL_ENV = "CLUB3090_UPSTREAM_URL"
DEFAULT_UPSTREAM_URL = "https://raw.githubusercontent.com/noonghunna/club-3090"
NO_GPU_DETECT_ENV = "CLUB3090_NO_GPU_DETECT"   # set (not "0"): GPU detection is switched off
DEFAULT_HUB_DEADLINE_S = 30.0           # one metadata request; two fit in the command's deadline
DEFAULT_HUB_COMMAND_DEADLINE_S = 60.0    # all metadata reads of one command, retries included
DEFAULT_DOWNLOAD_STALL_S = 60.0
WARMUP_WINDOW_S = 180.0       # upstream's allowance between "server answers" and verify-full (--warmup-s)
HUB_DEADLINE_ENV = "CLUB3090_HUB_DEADLINE"                  # seconds per Hub request (whole body)
HUB_COMMAND_DEADLINE_ENV = "CLUB3090_HUB_COMMAND_DEADLINE"  # seconds for all Hub reads of one command
DOWNLOAD_STALL_ENV = "CLUB3090_DOWNLOAD_STALL"              # seconds a download may go without progress
STATE_DIR_ENV = "CLUB3090_STATE_DIR"                        # the user's state folder
CAPTURES_ENV = "CLUB3090_CAPTURES"                          # capture bundles, relative to the working folder
NO_COLOR_ENV = "NO_COLOR"                                   # https://no-color.org


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number of seconds from ``env``; anything else keeps the default."""
    try:
        value = float(env.get(name, "") or default)
    except ValueError:
        return default
    return value if 0 < value < 1e7 else default


# bounded repeats: linear on a megabyte of letters with no "://" (bundles and logs pass through)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^/?#@\s]{0,1024}@")


def redact_url_credentials(text: str) -> str:
    """``https://user:pass@host/x`` -> ``https://<credentials>@host/x``, wherever it appears in ``text``."""
    return _USERINFO.sub(r"\1<credentials>@", text)


def _url_userinfo(url: str) -> tuple[str, ...]:
    """``user:pass`` (and ``pass``) of ``scheme://user:pass@host``: secrets like a token."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return ()
    if "@" not in parts.netloc:
        return ()
    userinfo = parts.netloc.rpartition("@")[0]
    return tuple(s for s in (userinfo, parts.password) if s)


def resolve_hf_home(env: Mapping[str, str], flag: Path | None) -> Path:
    """--hf-home > $HF_HOME > $MODEL_DIR/.cache/huggingface > $XDG_CACHE_HOME/huggingface > ~/.cache/huggingface."""
    if flag is not None:
        return Path(flag).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser()
    if env.get("MODEL_DIR"):
        return Path(env["MODEL_DIR"]).expanduser() / ".cache" / "huggingface"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface"
    return Path("~/.cache/huggingface").expanduser()


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's state folder, the one rule for every file club3090 keeps: ``$CLUB3090_STATE_DIR``,
    else ``$XDG_STATE_HOME/club3090``, else ``~/.local/state/club3090``."""
    env = os.environ if env is None else env
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]).expanduser()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser() / "club3090"
    return Path("~/.local/state/club3090").expanduser()


def captures_dir(flag: Path | str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Where capture bundles go: ``--captures-dir``, else ``$CLUB3090_CAPTURES`` (both relative to the
    working folder), else ``pull-captures`` in the state folder (:func:`state_dir`)."""
    env = os.environ if env is None else env
    if flag is not None:
        return Path.cwd() / Path(flag)
    if env.get(CAPTURES_ENV):
        return Path.cwd() / env[CAPTURES_ENV]
    return state_dir(env) / "pull-captures"


def no_color(env: Mapping[str, str] | None = None) -> bool:
    """``NO_COLOR`` set to anything but the empty string switches colour off."""
    env = os.environ if env is None else env
    return bool(env.get(NO_COLOR_ENV))


def unicode_terminal(env: Mapping[str, str] | None = None) -> bool:
    """The locale is UTF-8 (``LC_ALL``, else ``LC_CTYPE``, else ``LANG``; none set: assumed), so
    block characters draw; a ``C`` / ``POSIX`` or other locale gets ASCII pictures."""
    env = os.environ if env is None else env
    locale = next((env[name] for name in ("LC_ALL", "LC_CTYPE", "LANG") if env.get(name)), None)
    return locale is None or "utf-8" in locale.lower() or "utf8" in locale.lower()


def _token_from_file(hf_home: Path, env: Mapping[str, str]) -> str | None:
    path = Path(env["HF_TOKEN_PATH"]).expanduser() if env.get("HF_TOKEN_PATH") else hf_home / "token"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def _hub_cache_dir(env: Mapping[str, str], hf_home_flag: Path | None) -> Path | None:
    """huggingface_hub's own rule: HF_HUB_CACHE (legacy HUGGINGFACE_HUB_CACHE) moves the cache out of HF_HOME.

    An explicit --hf-home is the user's later word, so it keeps its own hub/ folder.
    """
    raw = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    return Path(raw).expanduser() if raw and hf_home_flag is None else None


@dataclass(frozen=True, slots=True)
class Settings:
    hf_home: Path
    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = None
    offline: bool = False
    debug: bool = False
    secrets: tuple[str, ...] = ()     # every token value found (env and token file), for redaction
    gpu_detect: bool = True           # False under CLUB3090_NO_GPU_DETECT
    hub_deadline_s: float = DEFAULT_HUB_DEADLINE_S                   # one Hub request, connect to last byte
    hub_command_deadline_s: float = DEFAULT_HUB_COMMAND_DEADLINE_S   # all Hub reads of one command
    download_stall_s: float = DEFAULT_DOWNLOAD_STALL_S               # a download without progress fails
    upstream_url: str = DEFAULT_UPSTREAM_URL                         # club-3090 files (patch payloads)
    allow_xet: bool = False           # --allow-xet: huggingface_hub's Xet transfer rung (edges/hub.xet_rung)
    hub_cache_dir: Path | None = None  # $HF_HUB_CACHE, as huggingface_hub reads it; None: HF_HOME/hub

    @property
    def redaction_secrets(self) -> tuple[str, ...]:
        """Literal strings capture bundles and submissions must never contain."""
        return tuple(dict.fromkeys(s for s in (self.token, *self.secrets) if s))

    @property
    def hub_cache(self) -> Path:
        return self.hub_cache_dir if self.hub_cache_dir is not None else self.hf_home / "hub"

    def __repr__(self) -> str:  # never show the token
        return (f"Settings(hf_home={str(self.hf_home)!r}, endpoint={redact_url_credentials(self.endpoint)!r}, "
                f"token={'<set>' if self.token else None}, offline={self.offline})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, hf_home_flag: Path | None = None,
                 debug: bool = False) -> "Settings":
        env = os.environ if env is None else env
        hf_home = resolve_hf_home(env, hf_home_flag)
        from_file = _token_from_file(hf_home, env)
        token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or from_file
        endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        secrets = tuple(dict.fromkeys(s for s in (*(env.get(k) for k in TOKEN_ENV), from_file,
                                                  *_url_userinfo(endpoint)) if s))
        # the same rule as huggingface_hub: HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE
        raw_offline = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
        offline = raw_offline.strip().lower() in {"1", "true", "yes", "on"}
        return cls(hf_home=hf_home, hub_cache_dir=_hub_cache_dir(env, hf_home_flag),
                   endpoint=endpoint,
                   token=token, offline=offline,
                   debug=debug or env.get("CLUB3090_DEBUG", "") not in {"", "0"},
                   secrets=secrets,
                   gpu_detect=env.get(NO_GPU_DETECT_ENV, "").strip() in ("", "0"),
                   hub_deadline_s=_seconds(env, HUB_DEADLINE_ENV, DEFAULT_HUB_DEADLINE_S),
                   hub_command_deadline_s=_seconds(env, HUB_COMMAND_DEADLINE_ENV,
                                                           DEFAULT_HUB_COMMAND_DEADLINE_S),
                   download_stall_s=_seconds(env, DOWNLOAD_STALL_ENV, DEFAULT_DOWNLOAD_STALL_S),
                   upstream_url=(env.get(UPSTREAM_URL_ENV) or DEFAULT_UPSTREAM_URL).rstrip("/"))
