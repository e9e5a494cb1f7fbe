"""`deskllm models`: list, import or remove installed models."""

from __future__ import annotations

import argparse
import json
import sys

from deskllm.store import ModelLibrary, open_database


def register(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("models", help="list, import or remove installed models")
    m.add_argument("--json", action="store_true")
    m.add_argument("--import", dest="import_paths", action="append", default=[],
                   metavar="PATH", help="add a .gguf file or every model in a folder")
    m.add_argument("--scan", action="store_true",
                   help="add the models of the Hugging Face cache and LM Studio, if present")
    m.add_argument("--remove", metavar="NAME", help="forget an installed model")
    m.add_argument("--delete-file", action="store_true", help="with --remove: delete the file")
    m.add_argument("--yes", action="store_true", help="with --remove: do not ask")
    m.set_defaults(func=cmd_models)
    # Subcommands, as `deskllm remote`, `ollama list` or `lms ls` have them; the flags above
    # keep working. SUPPRESS: a subcommand's flag left out must not hide the parent's.
    actions = m.add_subparsers(dest="action", metavar="{list,import,scan,remove}")
    listing = actions.add_parser("list", aliases=["ls"], help="installed models (the default)")
    listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    adding = actions.add_parser("import", help="add .gguf files, or every model in folders")
    adding.add_argument("paths", nargs="+", metavar="PATH")
    actions.add_parser("scan", help="add the models of the Hugging Face cache and LM Studio"
                       ).set_defaults(scan=True)  # fmt: skip
    removing = actions.add_parser("remove", aliases=["rm"], help="forget an installed model")
    removing.add_argument("name", metavar="NAME")
    removing.add_argument("--delete-file", action="store_true", default=argparse.SUPPRESS,
                          help="delete the file too")  # fmt: skip
    removing.add_argument("--yes", action="store_true", default=argparse.SUPPRESS,
                          help="do not ask")  # fmt: skip


def cmd_models(args: argparse.Namespace) -> int:
    from deskllm.store.library_import import import_known_folders, import_path

    library = ModelLibrary(open_database())
    library.ensure_starter()
    if getattr(args, "name", None):  # `models remove NAME`
        args.remove = args.name
    paths = [*args.import_paths, *getattr(args, "paths", [])]
    results = [import_path(library, p) for p in paths]
    if args.scan:
        results.append(import_known_folders(library))
    for result in results:
        for model in result.added:
            print(f"added {model.name}: {model.path}", file=sys.stderr)
        for path, why in result.skipped:
            print(f"skipped {path}: {why}", file=sys.stderr)
    if args.remove:
        return _remove(library, args)
    if results:
        return 1 if any(r.skipped and not r.added for r in results) else 0
    models = library.list()
    if args.json:
        print(json.dumps([m.__dict__ | {"exists": m.exists} for m in models], indent=2))
        return 0
    if not models:
        print("no models installed")
    for m in models:
        missing = "" if m.exists else "  [file missing: moved or deleted outside deskllm]"
        print(
            f"{m.name}\n  {m.architecture}, {m.parameters / 1e6:.0f}M params, {m.quant}, "
            f"{m.size_bytes / 2**20:.0f} MiB, context {m.context_length}\n  {m.path}{missing}"
        )
    return 0


def _remove(library: ModelLibrary, args: argparse.Namespace) -> int:
    model = library.find(args.remove)
    if model is None:
        print(f"deskllm: no installed model matches {args.remove!r}", file=sys.stderr)
        return 1
    what = f"{model.name} ({model.path})" + (" and delete the file" if args.delete_file else "")
    if not args.yes:
        answer = input(f"Remove {what}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing removed", file=sys.stderr)
            return 1
    library.remove(model.id, delete_file=args.delete_file)
    print(f"removed {model.name}", file=sys.stderr)
    return 0
