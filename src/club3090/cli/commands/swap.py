"""`club3090 swap REPO --profile-like KEY --dir DIR`: serve a fine-tune of a curated model on the
curated profile's own service (upstream's Route C). Stages: ``club3090.pipeline.swap``.

Check that REPO is a fine-tune the curated profile KEY can serve (same architecture row,
quantization method, bits and group size, the geometry the profile was measured on, no remote
code), re-price the fit with REPO's own weight bytes, then write the curated service into DIR with
only the model and the served name re-pointed (image, patches, flags and drafter kept), download,
start and verify like `club3090 up`.

Exit codes: 0 serving and verified, or written (--emit-only, --no-start); 1 the start or the
verification failed; 2 refused (a swap-* token names the differing fact, or disk-short); 64 usage;
65 a payload or weight file failed its sha256; 69 the launcher is missing or the Hub is unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from club3090.cli.commands._types import add_bundle_flags, add_command, add_gpus_flag, gpu_set
from club3090.cli.commands.up import add_launcher_flag
from club3090.cli.exit_codes import exit_code, with_exit_code
from club3090.cli.render import safe
from club3090.edges import launchers


def add_parser(sub: Any) -> None:
    p = add_command(sub, "swap", __doc__,
                    help="serve a fine-tune of a curated model on the curated profile's service")
    p.add_argument("source", metavar="REPO", help="Hugging Face repo id of the fine-tune")
    p.add_argument("--profile-like", required=True, metavar="KEY",
                   help="the curated profile whose service serves REPO (`club3090 profiles` lists them)")
    add_bundle_flags(p)
    p.add_argument("--emit-only", action="store_true",
                   help="write the bundle only: no weight download, no start")
    add_launcher_flag(p, launchers.names(multi_node=False))
    add_gpus_flag(p)
    p.add_argument("--served-model-name", metavar="NAME",
                   help="the name clients ask for (default: REPO's name, lower-cased)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.cli.commands.pull import captures_root
    from club3090.cli.commands.up import progress
    from club3090.errors import UsageError
    from club3090.pipeline.swap import SwapRequest, swap
    from club3090.pipeline.up import UpRequest

    if args.port is not None and not 0 < args.port < 65536:
        raise UsageError("--port must be 1-65535")
    serve = UpRequest(source=args.source, directory=args.directory, profile_like=args.profile_like,
                      launcher=args.launcher, gpus=gpu_set(args, provider.catalog()), port=args.port,
                      no_start=args.no_start, vllm=args.vllm, force=args.force, skip_tools=args.skip_tools,
                      progress=progress(args), captures=captures_root(args), warmup_s=args.warmup_s)
    req = SwapRequest(serve, emit_only=args.emit_only, served_model_name=args.served_model_name)
    result = swap(req, provider)
    if sys.stderr.isatty() and result.up is not None:
        print(file=sys.stderr)
    if args.json:
        from club3090.cli.commands._up_render import lines

        doc = {**result.to_json(), "lines": [ln for fact in result.facts for ln in lines(fact)]}
        print(safe(json.dumps(with_exit_code(doc, result.outcome), indent=2, default=str), multiline=True))
    return exit_code(result.outcome)
