"""`deskllm quality MODEL --reference REF`: how much a quantization changes the model's
predictions on your own text (KL divergence, as llama.cpp's llama-perplexity measures it;
see deskllm.measure.quality for the method and the JSON keys)."""

from __future__ import annotations

import argparse
import json
import sys

from deskllm import settings as settings_mod
from deskllm.backends import Resolver
from deskllm.cli.chat import resolve_model
from deskllm.engine.client import EngineClient
from deskllm.loader import ModelLoader, params_from_settings
from deskllm.measure.quality import (
    DEFAULT_CTX,
    QualityError,
    QualityProgress,
    QualityResult,
    check_quality,
)
from deskllm.measure.quality_text import TextNotFound, conversation_text, file_text, sample_text
from deskllm.store import open_database
from deskllm.store.quality_results import QualityResults


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quality", help="KL divergence of a quantized model against a reference on a text"
    )
    p.add_argument("model", help="the model to check: a .gguf path or an installed name")
    p.add_argument("--reference", required=True,
                   help="a higher-precision file of the same model (Q8_0, F16, ...)")  # fmt: skip
    source = p.add_mutually_exclusive_group()
    source.add_argument("--text", metavar="FILE", help="the text to score (default: a bundled "
                        "sample of ~4,000 tokens of plain English)")  # fmt: skip
    source.add_argument("--conversation", metavar="ID", help="score a stored conversation")
    p.add_argument("--ctx", type=int, default=DEFAULT_CTX,
                   help=f"tokens per chunk (default {DEFAULT_CTX}); the second half of each "
                   "is scored")  # fmt: skip
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: settings)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_quality)


def _progress(p: QualityProgress) -> None:
    what = "reference" if p.stage == "reference" else "model    "
    end = "\n" if p.chunk == p.chunks else ""
    print(f"\r{what} chunk {p.chunk}/{p.chunks}", end=end, file=sys.stderr, flush=True)


def cmd_quality(args: argparse.Namespace) -> int:
    db = open_database()
    resolver = Resolver(db)
    model_path = resolve_model(resolver, args.model)
    reference_path = resolve_model(resolver, args.reference)
    try:
        if args.conversation:
            text = conversation_text(db, args.conversation)
        elif args.text:
            text = file_text(args.text)
        else:
            text = sample_text()
    except TextNotFound as exc:
        print(f"deskllm: {exc}", file=sys.stderr)
        return 1
    settings = settings_mod.load()
    params = [
        params_from_settings(settings, path, n_threads=args.threads)
        for path in (model_path, reference_path)
    ]
    loader = ModelLoader(EngineClient(), db=db)
    try:
        result = check_quality(
            params[0], params[1], text, args.ctx, on_progress=_progress, loader=loader
        )
    except KeyboardInterrupt:
        print("\ndeskllm: cancelled", file=sys.stderr)
        return 130
    except QualityError as exc:
        print(f"\ndeskllm: {exc}", file=sys.stderr)
        return 1
    QualityResults(db).save(result.to_json(), text_sha256=result.text_sha256, n_ctx=result.n_ctx)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        _print(result)
    return 0


def _print(r: QualityResult) -> None:
    d = r.delta_p
    print(f"model        {r.model}")
    print(f"reference    {r.reference}")
    print(f"tokens       {r.tokens} scored (chunks of {r.n_ctx})")
    print(f"KL div.      mean {r.mean_kld:.6f}  median {r.median_kld:.6f}  p99 {r.kld_p99:.6f}")
    print(f"same top     {r.same_top_pct:.2f} %")
    print(f"perplexity   {r.ppl:.4f} vs {r.ppl_reference:.4f} (ratio {r.ppl_ratio:.4f})")
    print(f"delta p      mean {d.mean * 100:+.3f} %  rms {d.rms * 100:.3f} %  "
          f"p01 {d.p01 * 100:+.2f} %  p99 {d.p99 * 100:+.2f} %")  # fmt: skip
    print(f"took         {r.seconds:.1f} s, at most {r.peak_rss_bytes / 2**20:.0f} MiB per pass")
