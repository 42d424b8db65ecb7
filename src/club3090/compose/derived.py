"""Derived compose ``[D]``: a patchless vLLM service for a non-curated model that passed the gate.

Owns the derived-emittable clauses (engine install method, overlay features, KV format, drafter,
GPU count), the quantization / compute-dtype dispatch, and the service layout (docs/DESIGN.md §12).
Clause refusals are ``derived-runtime-unsupported:<clause>`` tokens. Pure: nothing is written.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from club3090.compose.launch import Launch, escape_dollars, has_control_chars, render
from club3090.compose.outcome import DERIVED_PREFIX, ComposeOutcome, refuse
from club3090.compose.param_slots import format_number
from club3090.compose.provenance import one_line
from club3090.errors import InputError, UsageError
from club3090.fit.kv_formats import canonical_dtype
from club3090.model.slug import sanitize_slug
from club3090.outcome import Notice, NoticeCode, Outcome
from club3090.version import __version__

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog
    from club3090.model.spec import ModelSpec

DERIVED_KV_FORMATS = ("bf16", "fp16", "fp8_e5m2", "fp8_e4m3")
DERIVED_QUANT_METHODS = ("awq", "gptq", "compressed-tensors", "fp8")
AUTOROUND_METHODS = ("auto-round", "autoround", "auto_round", "intel/auto-round")
DERIVED_COMPUTE_DTYPES = ("bfloat16", "float16")   # canonical names (kvformats.canonical_dtype)


PULLS_MOUNT_ROOT = "/models/club3090/pulls"
MAX_SERVED_NAME = 256
MAX_SLUG = 200


def _derived_refuse(profile: str, clause: str, detail: str) -> ComposeOutcome:
    return refuse(profile, f"{DERIVED_PREFIX}:{clause}", detail)


def derived_compose(spec: "ModelSpec", profile_key: str, catalog: "Catalog", *, snapshot_dir: Path,
                    hf_home: Path, max_model_len: int | None, trust_remote_code: bool,
                    gpu_indices: Sequence[int], fmt: str = "compose",
                    out_name: str | None = None) -> ComposeOutcome:
    """A patchless vLLM service for a non-curated model that passed the gate.

    ``max_model_len`` overrides the profile's (the fit engine's largest fitting
    context); ``gpu_indices`` are the visible GPUs, of which the first ``tp`` are used.
    Raises ``InputError`` for names or paths carrying control characters, ``UsageError`` for an
    unknown profile.
    """
    profile = catalog.profiles.get(profile_key)
    if profile is None:
        raise UsageError(f"unknown profile {profile_key!r}")
    for label, value in (("model reference", spec.ref), ("snapshot path", str(snapshot_dir)),
                         ("HF_HOME", str(hf_home))):
        if has_control_chars(value):
            raise InputError(label, "contains control characters; refusing to write a compose")
    if not str(snapshot_dir).startswith("/"):
        raise InputError("snapshot path", f"{snapshot_dir} is not absolute; a relative bind mount "
                                          "would resolve from the compose file's folder")
    engine = catalog.engines.get(profile.engine)
    if (engine is None or engine.type != "vllm" or engine.install_method != "docker_image"
            or engine.required_genesis or engine.vendored_overlays):
        return _derived_refuse(profile_key, "engine-install-method",
                               f"engine {profile.engine} is not an overlay-free docker image")
    if profile.required_engine_features:
        return _derived_refuse(profile_key, "overlay-feature",
                               "profile requires " + ", ".join(profile.required_engine_features))
    if profile.kv_format not in DERIVED_KV_FORMATS:
        return _derived_refuse(profile_key, "kv", f"kv format {profile.kv_format}")
    if profile.drafter is not None:
        return _derived_refuse(profile_key, "drafter", f"profile uses drafter {profile.drafter}")
    tp = profile.tp
    if len(gpu_indices) < tp or tp < 1:
        return _derived_refuse(profile_key, "gpu-count",
                               f"{len(gpu_indices)} GPU(s) visible, tp {tp} needs {tp}")
    selected = [int(g) for g in list(gpu_indices)[:tp]]

    compute = canonical_dtype(spec.compute_dtype or spec.arch.torch_dtype or "")
    if compute not in DERIVED_COMPUTE_DTYPES:
        compute = None
    quant_args: list[str] = []
    method = (spec.quantization.method.lower() if spec.quantization is not None else None)
    if method is not None:
        if method in AUTOROUND_METHODS:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived:autoround",
                                   "AutoRound checkpoints are not dispatched in derived composes")
        if method not in DERIVED_QUANT_METHODS:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived",
                                   f"quantization {method}")
        if compute is None:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived:missing-torch-dtype",
                                   f"no compute dtype for {method}")
        quant_args = ["--quantization", method, "--dtype", compute]
    else:
        raw = (spec.compute_dtype or spec.arch.torch_dtype or "")
        if not raw:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived:missing-torch-dtype",
                                   "no torch_dtype in the checkpoint")
        if compute is None:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived",
                                   f"dtype {raw}")
        quant_args = ["--dtype", compute]

    kv_arg = catalog.kv_formats[profile.kv_format].vllm_arg if profile.kv_format in catalog.kv_formats else None
    slug = sanitize_slug(spec.ref, max_len=MAX_SLUG)
    served = slug[:MAX_SERVED_NAME]
    model_path = f"{PULLS_MOUNT_ROOT}/{slug}"
    ctx = max_model_len if max_model_len is not None else profile.max_model_len
    port = str(profile.port)
    devices = ",".join(str(g) for g in selected)

    command = [model_path, "--served-model-name", served,
               "--tensor-parallel-size", str(tp),
               "--max-model-len", str(int(ctx))]
    if profile.mem_util is not None:
        command += ["--gpu-memory-utilization", format_number(profile.mem_util)]
    command += ["--max-num-seqs", str(profile.max_num_seqs)]
    if kv_arg is not None:
        command += ["--kv-cache-dtype", kv_arg]
    command += quant_args
    if trust_remote_code:
        command.append("--trust-remote-code")
    command += ["--host", "0.0.0.0", "--port", port]

    service: dict[str, Any] = {
        "image": escape_dollars(engine.image),
        "container_name": f"club3090-{slug}"[:128],
        "restart": "no",
        "ports": [f"{port}:{port}"],
        "volumes": [{"type": "bind", "source": escape_dollars(str(snapshot_dir)),
                     "target": model_path, "read_only": True}],
        "environment": [f"NVIDIA_VISIBLE_DEVICES={devices}", "HF_HUB_OFFLINE=1",
                        "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1"],
        "shm_size": "16gb",
        "ipc": "host",
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "device_ids": [str(g) for g in selected], "capabilities": ["gpu"]}]}}},
        "entrypoint": ["vllm", "serve"],
        "command": [escape_dollars(a) for a in command],
    }
    notices: list[Notice] = []
    snap = PurePosixPath(posixpath.normpath(str(snapshot_dir)))
    if PurePosixPath(posixpath.normpath(str(hf_home))) not in (snap, *snap.parents):
        notices.append(Notice(NoticeCode.SNAPSHOT_OUTSIDE_HF_HOME, "the snapshot folder is outside HF_HOME",
                              {"snapshot": str(snapshot_dir), "hf_home": str(hf_home)}))
    trc_note = "emitted (the gate permitted it)" if trust_remote_code else "not emitted"
    header = (
        f"generated by club3090 {__version__} - do not edit; derived compose (patchless)",
        f"catalog: {catalog.provenance} (schema {catalog.schema_version})   profile-like: {profile_key}",
        f"model: {one_line(spec.ref)}" + (f"@{spec.commit}" if spec.commit else ""),
        f"engine pin: {engine.pin}   image: {engine.image}",
        f"trust-remote-code: {trc_note}",
        "patches wired: none (derived composes are patchless)",
        f"run: docker compose -f {out_name or '<out>'} up -d",
    )
    launch = Launch(kind="derived", service_name=f"vllm-{slug}"[:128], service=service,
                    header=header, profile=profile_key)
    return ComposeOutcome(ok=True, outcome=Outcome.OK, profile=profile_key,
                          text=render(launch, fmt), format=fmt, launch=launch,
                          notices=tuple(notices), trust_remote_code=trc_note)

