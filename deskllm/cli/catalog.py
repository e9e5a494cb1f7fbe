"""`deskllm search TEXT` and `deskllm repo REPO_ID`: the Hub catalog on the command line.

With --json each prints one JSON object on stdout. Offline answers come from the cache and
say so (a note on stderr; `"offline": true` in JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from deskllm.catalog.hub_types import SORTS


def register(subparsers: argparse._SubParsersAction) -> None:
    search = subparsers.add_parser(
        "search",
        help="search Hugging Face for GGUF models",
        description="Search Hugging Face for repos with GGUF files (cached for offline use).",
    )
    search.add_argument("text", help="words to look for in repo names")
    search.add_argument("--sort", choices=SORTS, default="downloads")
    search.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    search.add_argument("--json", action="store_true", help="print one JSON object")
    search.set_defaults(func=run_search)

    repo = subparsers.add_parser(
        "repo",
        help="list a repo's GGUF model files",
        description="List a Hugging Face repo's GGUF files: quantization, size, sha256, parts.",
    )
    repo.add_argument("repo_id", help="e.g. bartowski/SmolLM2-135M-Instruct-GGUF")
    repo.add_argument("--json", action="store_true", help="print one JSON object")
    repo.set_defaults(func=run_repo)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _source(source: Any) -> dict[str, Any]:
    return {
        "offline": source.offline,
        "from_cache": source.from_cache,
        "fetched_at": source.fetched_at or None,
        "reason": source.reason,
    }


def _note_offline(source: Any) -> None:
    if source.offline and source.from_cache:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(source.fetched_at))
        print(f"offline: {source.reason}; showing what was cached on {when}", file=sys.stderr)


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def run_search(args: argparse.Namespace) -> int:
    from deskllm.catalog.hub import CatalogError, HubCatalog
    from deskllm.catalog.hub_types import to_json

    try:
        result = HubCatalog().search(args.text, sort=args.sort, limit=args.limit)
    except CatalogError as exc:
        print(f"deskllm search: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(to_json(result) | _source(result.source), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif result.hits:
        rows = [
            (
                h.repo_id,
                str(h.downloads),
                str(h.likes),
                (h.last_modified or "")[:10],
                "gated" if h.gated else "",
            )
            for h in result.hits
        ]
        print(_table(rows, ("repo", "downloads", "likes", "updated", "")))
    if result.offline and not result.hits:
        print(f"deskllm search: {result.source.reason}; nothing cached for this search",
              file=sys.stderr)  # fmt: skip
        return 1
    if not args.json:
        _note_offline(result.source)
        if not result.hits:
            print(f"no GGUF repos match {args.text!r}", file=sys.stderr)
    return 0


def run_repo(args: argparse.Namespace) -> int:
    from deskllm.catalog.hub import CatalogError, HubCatalog
    from deskllm.catalog.hub_types import to_json

    try:
        details = HubCatalog().repo(args.repo_id)
    except CatalogError as exc:
        print(f"deskllm repo: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(to_json(details) | _source(details.source), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{details.repo_id}  license: {details.license or 'unknown'}"
          + (f"  gated ({details.gated})" if details.gated else ""))  # fmt: skip
    rows = [
        (
            f.name,
            f.quant or "?",
            _size(f.size),
            (f.sha256 or "")[:12],
            str(len(f.parts)) if f.complete else f"{len(f.parts)} of {f.expected_parts}",
        )
        for f in details.files
    ]
    if rows:
        print(_table(rows, ("file", "quant", "size", "sha256", "parts")))
    else:
        print("no GGUF model files in this repo")
    for f in details.mmproj:
        print(f"vision projector (mmproj): {f.name}  {_size(f.size)}")
    if details.access_message:
        print(details.access_message, file=sys.stderr)
    _note_offline(details.source)
    return 0
