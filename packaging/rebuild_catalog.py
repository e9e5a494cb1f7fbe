"""Rebuild the curated model catalog (resources/catalog/curated.json) from the Hub.

    .venv/bin/python packaging/rebuild_catalog.py [--in FILE] [--out FILE] [--only REPO ...]
    .venv/bin/python packaging/rebuild_catalog.py --estimate     # offline: sizes from shapes

The repos are the ones the catalog lists (add an entry by hand: repo_id, family, params,
license, source, shape, and one file to start from). For each, from the Hub (HF_ENDPOINT
honoured): every complete GGUF model file with its size and sha256, and the model's shape
read from one file's GGUF header by HTTP Range requests (the planner's own remote-header
reader: a few MB, never the model). Family, parameter count and license stay as curated.
A repo the Hub cannot answer for keeps its entry; the exit status is then 1.

--estimate touches no network: it recomputes the size of every file that has no sha256 from
the entry's shape (deskllm/catalog/synthetic_header.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deskllm.catalog.curated import (  # noqa: E402 (the checkout's package, not an installed one)
    CuratedCatalog,
    CuratedFile,
    CuratedModel,
    catalog_to_json,
    curated_path,
    parse_curated,
)
from deskllm.catalog.quants import kl_divergence  # noqa: E402
from deskllm.catalog.synthetic_header import estimated_file_size, shape_facts  # noqa: E402

HEADER_QUANTS = ("Q4_K_M", "Q8_0")  # the file whose header gives the shape, if the repo has it


def rebuild_entry(model: CuratedModel, hub) -> CuratedModel:
    """One entry from the Hub: its quant files (complete, of a quant the planner ranks) with
    real sizes and sha256, and its shape from one file's header."""
    from deskllm.catalog.remote_header import combine_parts, remote_header

    details = hub.repo(model.repo_id)
    if details.offline:
        raise RuntimeError(details.source.reason or "the Hub was not reached")
    files = [f for f in details.files if f.complete and f.quant and kl_divergence(f.quant)]
    if not files:
        raise RuntimeError("no complete GGUF model file of a known quantization")
    files.sort(key=lambda f: f.size)
    source = next((f for q in HEADER_QUANTS for f in files if f.quant == q), files[0])
    revision = details.revision or "main"
    parts = [
        remote_header(hub, model.repo_id, p.path, sha256=p.sha256, revision=revision)
        for p in source.parts
    ]
    shape = shape_facts(combine_parts(parts))
    curated = [
        CuratedFile(f.quant, f.first_path, f.size, f.sha256, False) for f in files if f.quant
    ]
    note = f"shape: GGUF header of {source.first_path} at {revision[:12]}"
    return dataclasses.replace(model, shape=shape, files=tuple(curated), source=note,
                               refreshed_at=None)  # fmt: skip


def estimate(catalog: CuratedCatalog) -> CuratedCatalog:
    models = []
    for m in catalog.models:
        files = tuple(
            f if f.sha256 else dataclasses.replace(f, size_bytes=estimated_file_size(m.shape,
                                                                                     f.quant))
            for f in m.files
        )  # fmt: skip
        models.append(dataclasses.replace(m, files=files))
    return dataclasses.replace(catalog, models=tuple(models))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in", dest="source", type=Path, default=None,
                        help="the catalog to start from (default: the shipped one)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write (default: the file read)")
    parser.add_argument("--only", action="append", default=[], metavar="REPO",
                        help="rebuild only this repo (repeatable); the rest are kept")
    parser.add_argument("--estimate", action="store_true",
                        help="no network: recompute estimated sizes from the shapes")
    args = parser.parse_args(argv)  # fmt: skip
    source = args.source or curated_path()
    out = args.out or source
    data = json.loads(source.read_text(encoding="utf-8"))
    catalog = parse_curated(data)
    failed = 0
    if args.estimate:
        catalog = estimate(catalog)
    else:
        from deskllm.catalog.cache import CatalogCache
        from deskllm.catalog.hub import CatalogError, HubCatalog
        from deskllm.gguf.header import GgufError

        hub = HubCatalog(CatalogCache())
        models = []
        for model in catalog.models:
            if args.only and model.repo_id not in args.only:
                models.append(model)
                continue
            try:
                models.append(rebuild_entry(model, hub))
                print(f"{model.repo_id}: {len(models[-1].files)} files", file=sys.stderr)
            except (CatalogError, GgufError, RuntimeError) as exc:
                failed += 1
                models.append(model)
                print(f"{model.repo_id}: kept as it was ({exc})", file=sys.stderr)
        catalog = dataclasses.replace(
            catalog, models=tuple(models), catalog_date=datetime.date.today().isoformat()
        )
    result = catalog_to_json(catalog)
    result = {"catalog_date": result["catalog_date"], **{k: v for k, v in data.items()
              if k not in ("catalog_date", "models")}, "models": result["models"]}  # fmt: skip
    parse_curated(result)  # never write what the app would refuse
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
