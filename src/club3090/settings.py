"""Settings read once from flags and the environment by the CLI, then passed down explicitly."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
NO_GPU_DETECT_ENV = "CLUB3090_NO_GPU_DETECT"   # set (not "0"): GPU detection is switched off


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


def _token_from_file(hf_home: Path, env: Mapping[str, str]) -> str | None:
    path = Path(env["HF_TOKEN_PATH"]).expanduser() if env.get("HF_TOKEN_PATH") else hf_home / "token"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


@dataclass(frozen=True, slots=True)
class Settings:
    hf_home: Path
    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = None
    offline: bool = False
    debug: bool = False
    secrets: tuple[str, ...] = ()     # every token value found (env and token file), for redaction
    gpu_detect: bool = True           # False under CLUB3090_NO_GPU_DETECT

    @property
    def redaction_secrets(self) -> tuple[str, ...]:
        """Literal strings capture bundles and submissions must never contain."""
        return tuple(dict.fromkeys(s for s in (self.token, *self.secrets) if s))

    @property
    def hub_cache(self) -> Path:
        return self.hf_home / "hub"

    def __repr__(self) -> str:  # never show the token
        return (f"Settings(hf_home={str(self.hf_home)!r}, endpoint={self.endpoint!r}, "
                f"token={'<set>' if self.token else None}, offline={self.offline})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, hf_home_flag: Path | None = None,
                 debug: bool = False) -> "Settings":
        env = os.environ if env is None else env
        hf_home = resolve_hf_home(env, hf_home_flag)
        from_file = _token_from_file(hf_home, env)
        token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or from_file
        secrets = tuple(dict.fromkeys(s for s in (*(env.get(k) for k in TOKEN_ENV), from_file) if s))
        # the same rule as huggingface_hub: HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE
        raw_offline = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
        offline = raw_offline.strip().lower() in {"1", "true", "yes", "on"}
        return cls(hf_home=hf_home,
                   endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
                   token=token, offline=offline,
                   debug=debug or env.get("CLUB3090_DEBUG", "") not in {"", "0"},
                   secrets=secrets,
                   gpu_detect=env.get(NO_GPU_DETECT_ENV, "").strip() in ("", "0"))
