"""The llama.cpp family (llama.cpp, ik_llama.cpp, beellama): GGUF facts from headers
(``model/gguf*.py``, ``edges/gguf_*.py`` behind ``Provider.resolve_gguf``), llama.cpp's memory
model (``fit/llamacpp*.py``), the shipped or derived ``llama-server`` launch
(``compose/llamacpp.py``), and ``up``'s plan and launch (``engines/llamacpp/up.py``,
``engines/llamacpp/bundle.py``). Its ``kv-calc`` is :mod:`club3090.engines.llamacpp.price`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from club3090.compose.llamacpp import ENGINE_TYPE
from club3090.outcome import Reason
from club3090.validate.hints import ServerHints

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile
    from club3090.outcome import Stop
    from club3090.pipeline.fits import FitsRequest, FitsRow
    from club3090.pipeline.kv_calc import PriceRequest
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.up import UpRequest, UpResult
    from club3090.rig.hardware import HardwareFacts

__all__ = ["LLAMACPP", "LlamaCppEngine"]

GGUF_ONLY = "gguf-only"          # the resolver's sub-reason for a repository holding only GGUF files


class LlamaCppEngine:
    name = ENGINE_TYPE               # compose/llamacpp.ENGINE_TYPE: the catalog's type, the one spelling
    formats: tuple[str, ...] = ("gguf",)
    tools_flag = "--jinja"           # llama-server serves tool calls only with the chat template's format
    verify_hints = ServerHints(tools="is --jinja set, with a chat template that knows tools?",
                               reasoning="--reasoning-format")

    def claims(self, source: str | None) -> bool:
        from club3090.edges.gguf_source import is_gguf_path  # light: the readers load lazily

        return is_gguf_path(source)

    def claims_stop(self, stop: "Stop") -> bool:
        return stop.reason == Reason.UNSUPPORTED_FORMAT and stop.sub_reason == GGUF_ONLY

    def price(self, request: "PriceRequest", provider: "Provider") -> Any:
        from club3090.engines.llamacpp.price import price

        return price(request, provider)

    def fits_row(self, name: str, provider: "Provider", hw: "HardwareFacts", request: "FitsRequest", *,
                 label: str | None = None, only: tuple[str, ...] = ()) -> "FitsRow":
        from club3090.engines.llamacpp.fits import gguf_row

        return gguf_row(name, provider, hw, request, label=label, only=only)

    def up(self, req: "UpRequest", provider: "Provider", *, catalog: "Catalog",
           profile: "Profile | None") -> "UpResult":
        from club3090.engines.llamacpp.up import up_llamacpp

        return up_llamacpp(req, provider, catalog=catalog, profile=profile)

    @property
    def log_parser(self) -> Callable[[str], Any] | None:
        return None            # llama-server's start-up log is not parsed into receipts yet


LLAMACPP = LlamaCppEngine()
