"""Frozen records of the curated catalog. Built only by the loader (``catalog.builders``); everyone else reads them.

Units: bytes are integers, SM capabilities are ``Decimal`` ("8.6"), ratios such as ``mem_util``
are floats. Nested compose data (``ProfileRuntime.service``, ``Model.hf_config``) is plain
dicts and lists so it can be dumped as JSON or YAML directly; treat it as read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from club3090.model.spec import CONFIDENCES

# Closed value sets, shared by the loader (validation) and readers (documentation).
ENGINE_TYPES = ("vllm", "llama.cpp")
VLLM, LLAMACPP = ENGINE_TYPES            # the records' names; the pure core asks the properties below
ENGINE_STABILITY = ("stable", "experimental", "deprecated")   # "deprecated": upstream withdrew it
WEIGHT_KINDS = ("main", "draft", "gguf", "mmproj")
GPU_COUNT_CLASSES = ("single", "dual", "multi")   # Model.serving_defaults keys
WORKLOADS = ("fast-chat", "long-ctx-single", "vision-coding", "multi-stream-tenant", "tool-heavy")
PROFILE_STATUSES = ("production", "caveats", "experimental", "incubating", "preview",
                    "upstream-gated", "deprecated")
LAUNCHABLE_STATUSES = ("production", "caveats")
TRC_VALUES = ("true", "false", "unverified")
ARCH_CONFIDENCE = CONFIDENCES
ARCH_STATUS = ("verified", "unverified", "suspect")
CONSTRAINT_KINDS = ("cliff", "scope")
ON_FAIL = ("capability-degraded", "hard-refuse", "boot-refused")
NOT_EMITTABLE_REASONS = ("engine-not-vllm", "no-runtime-capture", "genesis-equipped")
# What each reason means, for listings (``club3090 profiles`` and ``compose --list``): long and short.
NOT_EMITTABLE_TEXT: Mapping[str, tuple[str, str]] = MappingProxyType({
    "engine-not-vllm": ("engine is not vLLM", "not vLLM"),
    "no-runtime-capture": ("no runtime capture of the shipped compose", "no capture"),
    "genesis-equipped": ("needs the Genesis patch set", "Genesis"),
})


@dataclass(frozen=True, slots=True)
class WeightVariant:
    id: str
    hf_repos: tuple[str, ...]          # first entry is the primary repo; all are aliases
    format: str                        # autoround, awq, gptq, fp8, compressed-tensors, bf16, gguf, ...
    quantization: str | None           # vLLM --quantization method when quantized, else None
    size_bytes: int | None             # decimal GB * 1e9 as recorded upstream; None = not recorded
    status: str
    kind: str                          # main | draft | gguf | mmproj
    revision: str | None = None
    engine: str | None = None          # serving family the variant is packed for (vllm, llama-cpp, ...)
    files: tuple[str, ...] = ()        # named files for GGUF variants
    note: str | None = None

    @property
    def hf_repo(self) -> str | None:
        return self.hf_repos[0] if self.hf_repos else None


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    display_name: str
    architecture: str                  # hf_config architectures[0] (the loader reads it there); the
                                       # arch row is Catalog.arch_row_for_model(id) (None for a model
                                       # no row covers; the loader requires one when a profile is
                                       # replayable)
    hf_config: Mapping[str, Any]       # config.json keys, so architecture.parse_config() works
    max_ctx_supported: int             # hf_config max_position_embeddings (the loader reads it there)
    weights: Mapping[str, WeightVariant]
    default_weight_variant: str
    description: str = ""
    hf_config_source: str = ""         # where hf_config came from (fixture repo or constructed)
    serving_defaults: Mapping[str, str] = field(default_factory=dict)  # single|dual|multi -> profile key
    family: str | None = None          # upstream's architecture family tag
    engine_defaults: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # family -> class -> key
    vram_sizing: Mapping[str, Any] = field(default_factory=dict)
    offload_residency: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VendoredOverlay:
    id: str
    pr_url: str | None = None


@dataclass(frozen=True, slots=True)
class Engine:
    id: str
    display_name: str
    type: str                          # "vllm" | "llama.cpp"
    install_method: str                # docker_image | pip
    image: str                         # install spec: image reference or pip requirement
    pin: str                           # "<engine-id>@<tag-or-sha>", read from image by the loader
    vllm_version: str | None           # "0.22.0" for release tags (read from image); None for
                                       # nightlies / llama.cpp
    min_sm: Decimal
    supported_kv_formats: tuple[str, ...]
    supported_weight_formats: tuple[str, ...]
    vendored_overlays: tuple[VendoredOverlay, ...]
    required_genesis: bool

    @property
    def is_vllm(self) -> bool:
        """Served by vLLM: priced with vLLM's memory model, written as a vLLM compose."""
        return self.type == VLLM

    @property
    def is_llamacpp(self) -> bool:
        """Served by llama.cpp's ``llama-server``."""
        return self.type == LLAMACPP
    stability: str = "stable"          # "deprecated": upstream withdrew the engine (image gone)

    @property
    def withdrawn(self) -> bool:
        return self.stability == "deprecated"


@dataclass(frozen=True, slots=True)
class Drafter:
    id: str
    method: str                        # mtp, mtp_assistant, dflash, mtp_gguf
    n_default: int
    n_max: int
    vram_footprint_bytes: int | None   # None = depends on the GGUF chosen
    speculative_config_template: str | None  # JSON text with {N} (and {LOCAL_MODEL_PATH}); None for llama.cpp-only drafters
    model_compat: tuple[str, ...]
    display_name: str = ""
    status: str = "experimental"
    local_model_path: str | None = None
    requires_engine_min: str | None = None


@dataclass(frozen=True, slots=True)
class Gpu:
    id: str
    display_name: str
    aliases: tuple[str, ...]
    memory_bytes: int                  # total as the driver reports it (nvidia-smi "Total")
    sm: Decimal
    nvlink: bool
    arch: str                          # ampere, ada, hopper, blackwell, turing, cdna3, apple-m3, ...
    vendor: str = "nvidia"
    # required in gpus.yaml; None only on records built by hand (the speed estimate then has none)
    memory_bandwidth_gb_s: Decimal | None = None   # peak, vendor specification
    bf16_tflops: Decimal | None = None             # dense, fp32 accumulate
    usable_memory_fraction: float | None = None   # unified memory: share the GPU may allocate
    mem_util_safe: float | None = None
    kv_format_default: Mapping[str, str] = field(default_factory=dict)
    power_cap_w_max: int | None = None
    power_cap_w_optimal: int | None = None
    power_cap_w_prefill: int | None = None
    driver_min: str | None = None
    cudagraph: str | None = None

    @property
    def usable_memory_bytes(self) -> int:
        """What a named card offers the fit: all of it, or the stated share of unified memory."""
        if self.usable_memory_fraction is None:
            return self.memory_bytes
        return int(self.memory_bytes * self.usable_memory_fraction)


@dataclass(frozen=True, slots=True)
class ProfileRuntime:
    genesis_equipped: bool
    service_name: str
    service: Mapping[str, Any]         # the shipped compose service, ${VAR:-default} tokens verbatim
    insertion_points: tuple[str, ...]  # subset of ("volumes", "entrypoint") present in the service
    top_level: Mapping[str, Any]       # top-level keys of the shipped file other than services
    genesis_evidence: str = ""


@dataclass(frozen=True, slots=True)
class Profile:
    key: str
    model: str
    weights_variant: str
    workload: str
    engine: str
    drafter: str | None
    kv_format: str
    tp: int
    pp: int
    max_model_len: int                 # context length served (vLLM --max-model-len)
    max_num_seqs: int
    mem_util: float | None             # None for llama.cpp profiles
    port: int
    status: str
    required_sm: Decimal | None
    fallback_sm: Decimal | None
    requires_nvlink: bool
    required_engine_features: tuple[str, ...]
    compose_path: str
    reference_gpu: str                 # Gpu id the profile was validated on
    runtime: ProfileRuntime | None
    status_note: str | None = None
    archived: bool = False             # not in upstream's registry at the synced commit
    replaced_by: str | None = None     # the current profile replacing a withdrawn one
    aliases: tuple[str, ...] = ()      # old slugs upstream renamed to this one
    act_format: str = "16bit"
    act8_capable: bool = False
    offload: str | None = None
    moe_cache: bool = False
    host_ram_gb: int | None = None
    chat_template: str = "native"
    requires_homogeneous_arch: bool = False
    weights_companions: tuple[str, ...] = ()
    gateway: bool = False
    serve_aliases: tuple[str, ...] = ()
    sampler_profiles: Mapping[str, Any] = field(default_factory=dict)
    default_arch_allow: tuple[Decimal, ...] = ()
    category: str | None = None
    gpu_assignment_mode: str = "contiguous"
    recommended_engine_features: tuple[str, ...] = ()

    @property
    def launchable(self) -> bool:
        return self.status in LAUNCHABLE_STATUSES


@dataclass(frozen=True, slots=True)
class EnginePin:
    pin: str                           # "<engine-id>@<tag-or-sha>"
    loads: bool
    reason: str | None = None

    @property
    def engine(self) -> str:
        return self.pin.split("@", 1)[0]

    @property
    def tag(self) -> str:
        return self.pin.split("@", 1)[1] if "@" in self.pin else ""


@dataclass(frozen=True, slots=True)
class AppliesWhen:
    """The shapes a kernel constraint applies to: every condition given must hold (none: always)."""

    tp_min: int | None = None
    tp_max: int | None = None
    pp_min: int | None = None
    kv_formats: tuple[str, ...] = ()
    weight_formats: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    sm_max: Decimal | None = None


@dataclass(frozen=True, slots=True)
class KernelConstraint:
    """One known kernel limit of an architecture. ``kind``: ``cliff`` (printed where it applies) or
    ``scope`` (what the row does not assert; never printed as a cliff)."""

    text: str
    kind: str = "cliff"
    applies_when: AppliesWhen = AppliesWhen()


@dataclass(frozen=True, slots=True)
class ArchRow:
    arch: str
    engine_pins: tuple[EnginePin, ...]
    required_patches: tuple[str, ...]
    tp_divisors: tuple[int, ...]
    trust_remote_code: str             # "true" | "false" | "unverified"
    trust_remote_code_evidence: str | None
    confidence: str
    status: str
    config_architectures: tuple[str, ...]
    model_slugs: tuple[str, ...]
    kernel_constraints: tuple[KernelConstraint, ...] = ()
    golden_triple_profiles: tuple[str, ...] = ()      # replays pinned byte for byte (upstream's golden triple)

    def pin_for(self, pin: str) -> EnginePin | None:
        for entry in self.engine_pins:
            if entry.pin == pin:
                return entry
        return None


@dataclass(frozen=True, slots=True)
class DeliveryGap:
    profiles: tuple[str, ...]
    issue: str


@dataclass(frozen=True, slots=True)
class Patch:
    id: str
    models: tuple[str, ...]
    load_bearing_composes: tuple[str, ...]     # profile keys
    delivery_gaps: tuple[DeliveryGap, ...]
    mounts: tuple[str, ...]                    # compose volume strings
    invocations: tuple[str, ...]               # entrypoint lines
    on_fail: str
    foundational: bool
    capability: str | None
    deprecated_on: str | None = None
    files: tuple[str, ...] = ()                # upstream repository paths the patch ships

    @property
    def deprecated(self) -> bool:
        return self.deprecated_on is not None


@dataclass(frozen=True, slots=True)
class KvFormat:
    """A KV format the catalog's profiles and engines name. Its storage size (bytes per K / V
    element, per-head scales) is the estimator's business and lives in ``club3090.fit.kv_formats``
    only; ``tests/test_catalog.py`` checks every id here is priced there."""

    id: str
    min_sm: Decimal | None
    vllm_arg: str | None                       # --kv-cache-dtype value; None = omit the flag
    engines: tuple[str, ...]                   # engine types: "vllm", "llama.cpp"
    emittable: bool = True                     # False: never written into a compose (Genesis-only)
    max_sm: Decimal | None = None              # upper bound when a format is family-specific
    note: str = ""

    @property
    def on_vllm(self) -> bool:
        """vLLM serves this format (its ``--kv-cache-dtype`` takes it)."""
        return VLLM in self.engines


@dataclass(frozen=True, slots=True)
class Correction:
    """A recorded deviation from upstream's data: which values (key paths), what upstream says,
    and the evidence for ours."""

    file: str
    paths: tuple[str, ...]
    upstream: Any
    evidence: str


NO_DRAFTER = "none"                    # Anchor.drafter: the measured run used no drafter


@dataclass(frozen=True, slots=True)
class Anchor:
    """One measured start-up, with the inputs it was measured with.

    A recorded input (not None) is what the run used; ``profile`` (the curated profile whose shipped
    compose ran, if the catalog still has it) supplies only what the anchor does not record, e.g.
    the compose's ``--max-num-batched-tokens``. An anchor without a profile carries ``model`` and
    its inputs itself (the loader enforces which).
    """
    id: str
    set: str                           # the measurement set it came from (kvcalc-current-8of8, ...)
    profile: str | None
    gpu: str
    measured_peak_bytes: int | None
    measured_kv_tokens: int | None
    ctx: int | None                    # max_model_len of the run
    source: str
    gpu_count: int = 1                 # GPUs used (tp x pp)
    mem_util: float | None = None
    kv_format: str | None = None
    model: str | None = None           # catalog model whose geometry prices the run
    weights_variant: str | None = None  # a variant of ``model``
    weights_bytes: int | None = None   # recorded checkpoint size when the variant is not in the catalog
    tp: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None   # None = the profile's shipped compose, else vLLM's default
    drafter: str | None = None         # catalog drafter id, or NO_DRAFTER; None = not recorded
    engine: str | None = None          # catalog engine id of the run
    vllm_version: str | None = None    # release version of the run's engine pin ("0.21.0"); None = nightly
    note: str | None = None


@dataclass(frozen=True, slots=True)
class UpstreamFile:
    id: str                            # the file's path in the upstream repository
    commit: str
    size: int
    sha256: str
    executable: bool


@dataclass(frozen=True, slots=True)
class Upstream:
    id: str                            # the upstream project's name ("club-3090")
    repo: str                          # owner/name on GitHub
    commit: str | None = None          # the commit the catalog was synced from
    engine_preference: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    recommended_default_models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Catalog:
    version: str
    schema_version: int
    models: Mapping[str, Model]
    engines: Mapping[str, Engine]
    drafters: Mapping[str, Drafter]
    gpus: Mapping[str, Gpu]
    profiles: Mapping[str, Profile]
    arches: Mapping[str, ArchRow]
    patches: Mapping[str, Patch]
    kv_formats: Mapping[str, KvFormat]
    anchors: tuple[Anchor, ...]
    corrections: tuple[Correction, ...] = ()
    upstream_files: Mapping[str, UpstreamFile] = field(default_factory=dict)
    upstream: Mapping[str, Upstream] = field(default_factory=dict)
    _repo_index: Mapping[str, tuple[str, str]] = field(default_factory=dict, repr=False, compare=False)
    _gpu_index: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    _arch_alias: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def upstream_commit(self) -> str | None:
        """The upstream club-3090 commit the catalog data was synced from (None: not recorded)."""
        up = self.upstream.get("club-3090")
        return up.commit if up is not None else None

    @property
    def provenance(self) -> str:
        """``<version>`` or ``<version> (club-3090@<commit12>)``: what headers and --version print."""
        commit = self.upstream_commit
        return f"{self.version} (club-3090@{commit[:12]})" if commit else self.version

    def profile_key(self, name: str) -> str | None:
        """The profile ``name`` names: itself, or the profile an old (renamed) slug aliases."""
        if name in self.profiles:
            return name
        for key, p in self.profiles.items():
            if name in p.aliases:
                return key
        return None

    def find_variant(self, repo_id: str) -> tuple[Model, WeightVariant] | None:
        """The curated (model, variant) whose hf_repos lists ``repo_id`` (case-insensitive, @rev ignored)."""
        key = normalize_repo_id(repo_id)
        hit = self._repo_index.get(key)
        if hit is None:
            return None
        model = self.models[hit[0]]
        return model, model.weights[hit[1]]

    def arch_row(self, architecture: str) -> ArchRow | None:
        """Row by direct name, then by a row's ``config_architectures`` alias."""
        row = self.arches.get(architecture)
        if row is not None:
            return row
        alias = self._arch_alias.get(architecture)
        return self.arches.get(alias) if alias else None

    def arch_row_for_model(self, model_id: str) -> ArchRow | None:
        """Row whose ``model_slugs`` names the curated model; else the model's own architecture."""
        for row in self.arches.values():
            if model_id in row.model_slugs:
                return row
        model = self.models.get(model_id)
        return self.arch_row(model.architecture) if model is not None else None

    def gpu(self, name_or_alias: str) -> Gpu | None:
        gid = self._gpu_index.get(normalize_gpu_name(name_or_alias))
        return self.gpus[gid] if gid else None

    def gpu_suggestions(self, name: str, n: int = 3) -> list[str]:
        import difflib
        wanted = normalize_gpu_name(name)
        names = sorted(self._gpu_index)
        close = difflib.get_close_matches(wanted, names, n=n * 3, cutoff=0.5)
        out: list[str] = []
        for alias in close:
            gid = self._gpu_index[alias]
            if gid not in out:
                out.append(gid)
        if not out:
            out = [gid for alias, gid in sorted(self._gpu_index.items()) if wanted and wanted in alias]
            out = list(dict.fromkeys(out))
        return out[:n]

    def emittable(self, key: str) -> tuple[bool, str | None]:
        """docs/DESIGN.md §5: can ``club3090 compose`` replay this profile? The one owner of the
        scope rule (the gate's stratum 2, ``compose``'s scope refusal and ``profiles`` use it).

        Returns (True, None) or (False, reason) with reason one of :data:`NOT_EMITTABLE_REASONS`.
        A KV format marked ``emittable: false`` (the ``turboquant*`` formats) makes the profile
        Genesis-equipped, as docs/DESIGN.md §5 defines it.
        """
        profile = self.profiles[key]
        if self.engines[profile.engine].type != "vllm":
            return False, "engine-not-vllm"
        if profile.runtime is None:
            return False, "no-runtime-capture"
        kv = self.kv_formats.get(profile.kv_format)
        if profile.runtime.genesis_equipped or kv is None or not kv.emittable:
            return False, "genesis-equipped"
        return True, None

    def static_route(self, key: str) -> str:
        """For a profile ``compose`` cannot replay: the shipped compose file it comes from and its
        archive status, so a person can run it from upstream's repository (issue 28 item 7)."""
        p = self.profiles[key]
        archive = ("archived: not in upstream's registry at the synced commit" if p.archived
                   else "in upstream's registry")
        replaced = f"; replaced by {p.replaced_by}" if p.replaced_by else ""
        return (f"upstream ships it as {p.compose_path or '(no compose file recorded)'} "
                f"(status {p.status}, {archive}{replaced}); run that file from a checkout of "
                f"{self._upstream_repo()} at the catalog's commit")

    def _upstream_repo(self) -> str:
        up = self.upstream.get("club-3090")
        return up.repo if up is not None else "upstream's repository"

    def need_sm(self, key: str, kv_format: str | None = None) -> Decimal:
        """docs/DESIGN.md §6: max(engine min SM, fallback_sm else required_sm, KV-format floor).

        The one owner of the required-SM rule (``gates`` and ``profiles`` use it). ``kv_format``
        replaces the profile's own format (Path B prices a repo at the profile's shape, and a
        caller may override the format).
        """
        profile = self.profiles[key]
        term = profile.fallback_sm if profile.fallback_sm is not None else profile.required_sm
        return self.runtime_sm(profile.engine, term, kv_format or profile.kv_format)

    def runtime_sm(self, engine: str, profile_sm: Decimal | None, kv_format: str) -> Decimal:
        """The SM a runtime needs: max(``engine``'s min SM, the profile's term, the KV-format floor);
        a derived shape has no profile term (:meth:`need_sm` is this rule for a profile key)."""
        floor, _ceiling = self.kv_sm_window(kv_format)
        return max(self.engines[engine].min_sm, profile_sm or Decimal(0), floor or Decimal(0))

    def kv_sm_window(self, kv_format: str) -> tuple[Decimal | None, Decimal | None]:
        """(lowest, highest) SM a KV format is built for, from ``kv_formats.yaml`` (None = no
        bound; an unknown format has none). The one owner of the KV-format SM window."""
        kv = self.kv_formats.get(kv_format)
        return (kv.min_sm, kv.max_sm) if kv is not None else (None, None)

    def kv_arg(self, kv_format: str) -> str | None:
        """``--kv-cache-dtype`` value for a catalog KV format (None: omit the flag)."""
        return self.kv_formats[kv_format].vllm_arg


def normalize_repo_id(repo_id: str) -> str:
    return repo_id.strip().split("@", 1)[0].strip("/").lower()


def normalize_gpu_name(name: str) -> str:
    """'NVIDIA GeForce RTX 3090' / 'rtx_3090' / 'RTX-3090' -> 'rtx-3090'-like canonical token."""
    text = name.strip().lower()
    for prefix in ("nvidia ", "geforce "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.replace("geforce ", "")
    out = []
    for ch in text:
        out.append(ch if ch.isalnum() or ch == "." else "-")
    token = "".join(out)
    while "--" in token:
        token = token.replace("--", "-")
    return token.strip("-")
