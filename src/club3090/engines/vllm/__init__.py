"""vLLM: facts from ``config.json`` and safetensors headers (``model/``, ``Provider.resolve``), the
shape (``fit/shape.py``, ``fit/auto_shape.py``), vLLM's start-up accounting (``fit/memory.py``),
the curated replay or derived compose (``compose/``), the pull gate's strata (``gate/``,
``pipeline/pull_gate.py``) and the start-up log parser (``reports/vllm_log.py``).

vLLM is the registry's default: a request no other engine claims is priced and launched here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from club3090.validate.hints import VLLM_HINTS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile
    from club3090.outcome import Stop
    from club3090.pipeline.fits import FitsRequest, FitsRow
    from club3090.pipeline.kv_calc import PriceRequest
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.up import UpRequest, UpResult
    from club3090.rig.hardware import HardwareFacts

__all__ = ["VLLM", "VllmEngine"]


class VllmEngine:
    name = "vllm"
    formats: tuple[str, ...] = ("safetensors",)
    tools_flag = "--enable-auto-tool-choice"
    verify_hints = VLLM_HINTS

    def claims(self, source: str | None) -> bool:
        return False           # the default: claimed by nobody else, served here

    def claims_stop(self, stop: "Stop") -> bool:
        return False

    def price(self, request: "PriceRequest", provider: "Provider") -> Any:
        from club3090.pipeline.kv_calc import price_vllm

        return price_vllm(request, provider)

    def fits_row(self, name: str, provider: "Provider", hw: "HardwareFacts", request: "FitsRequest", *,
                 label: str | None = None, only: tuple[str, ...] = ()) -> "FitsRow":
        from club3090.pipeline.fits import vllm_row

        return vllm_row(name, provider, hw, request)

    def up(self, req: "UpRequest", provider: "Provider", *, catalog: "Catalog",
           profile: "Profile | None") -> "UpResult":
        from club3090.pipeline.up import up

        return up(req, provider)    # the pull gate's path: its strata are vLLM's

    @property
    def log_parser(self) -> Callable[[str], Any] | None:
        from club3090.reports.vllm_log import parse_startup

        return parse_startup


VLLM = VllmEngine()
