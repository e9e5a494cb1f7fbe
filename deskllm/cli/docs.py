"""`deskllm docs`: collections of folders indexed on this machine, and searching them.

    deskllm docs add NAME FOLDER...      make (or grow) a collection and index it
    deskllm docs index NAME              index again: only new and changed files are read
    deskllm docs list [--json]           collections, with their files, chunks and skips
    deskllm docs skipped NAME            the files not indexed, and why
    deskllm docs search NAME QUERY       the best passages (hybrid BM25 + vectors)
    deskllm docs remove NAME             the collection and its index (not the files)

Indexing prints its progress on stderr; a second run after Ctrl+C (or a crash) goes on where
it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from deskllm.documents.indexer import IndexProgress


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("docs", help="folders indexed for chats that cite your documents")
    actions = p.add_subparsers(dest="docs_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add folders to a collection (made if new), index it")
    add.add_argument("name")
    add.add_argument("folders", nargs="+", type=Path)
    add.add_argument("--embedding-model", type=Path, default=None,
                     help="an embedding GGUF (default: the bundled all-MiniLM-L6-v2)")
    add.add_argument("--threads", type=int, default=0, help="engine threads (0: physical cores)")
    add.add_argument("--json", action="store_true", help="print the final figures as JSON")
    add.set_defaults(func=cmd_add)
    idx = actions.add_parser("index", help="index a collection again (only what changed)")
    idx.add_argument("name")
    idx.add_argument("--threads", type=int, default=0)
    idx.add_argument("--json", action="store_true")
    idx.set_defaults(func=cmd_index)
    ls = actions.add_parser("list", aliases=["ls"], help="the collections")
    ls.add_argument("--json", action="store_true", help="one JSON object")
    ls.set_defaults(func=cmd_list)
    sk = actions.add_parser("skipped", help="the files of a collection that are not indexed")
    sk.add_argument("name")
    sk.set_defaults(func=cmd_skipped)
    se = actions.add_parser("search", help="the passages that best match a query")
    se.add_argument("name", help="a collection, or several joined by commas")
    se.add_argument("query")
    se.add_argument("-k", type=int, default=5, help="how many passages (default 5)")
    se.add_argument("--mode", choices=("hybrid", "bm25", "vector"), default="hybrid")
    se.add_argument("--json", action="store_true", help="one JSON object")
    se.set_defaults(func=cmd_search)
    rm = actions.add_parser("remove", aliases=["rm"], help="forget a collection and its index")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_remove)


def _store():
    from deskllm.documents.store import DocumentStore

    return DocumentStore()


def _fail(message: str, code: int = 1) -> int:
    print(f"deskllm docs: {message}", file=sys.stderr)
    return code


def _progress_line(progress: IndexProgress) -> None:
    if not sys.stderr.isatty() and not progress.finished:
        return  # a log gets the summary only
    eta = progress.eta_s
    line = (
        f"\r{progress.collection}: {progress.files_done}/{progress.files_total} files · "
        f"{progress.chunks} chunks · {progress.chunks_per_s:.1f} chunks/s"
        + (f" · ETA {eta:.0f} s" if eta is not None and not progress.finished else "")
        + (f" · {progress.files_skipped} skipped" if progress.files_skipped else "")
        + (f" · {progress.files_removed} removed" if progress.files_removed else "")
    )
    print(line.ljust(79), end="\n" if progress.finished or progress.cancelled else "",
          file=sys.stderr, flush=True)  # fmt: skip


def _run_index(documents, name: str, as_json: bool) -> int:
    try:
        progress = documents.index(name, on_progress=_progress_line)
    except KeyboardInterrupt:
        print("\nstopped; `deskllm docs index " + name + "` goes on from here",
              file=sys.stderr)  # fmt: skip
        return 130
    if as_json:
        print(json.dumps(_progress_json(progress)))
    return 0


def _progress_json(progress: IndexProgress) -> dict:
    return {
        "collection": progress.collection, "files_read": progress.files_done,
        "files_skipped": progress.files_skipped, "files_removed": progress.files_removed,
        "chunks": progress.chunks, "index_s": round(progress.elapsed_s, 3),
        "chunks_per_s": round(progress.chunks_per_s, 2),
    }  # fmt: skip


def cmd_add(args: argparse.Namespace) -> int:
    from deskllm.documents.service import Documents
    from deskllm.documents.store import CollectionError

    folders = [f.expanduser().resolve() for f in args.folders]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        return _fail(f"not a folder: {', '.join(missing)}", 2)
    documents = Documents(n_threads=args.threads)
    try:
        store = documents.store()
        if args.name in {c.name for c in store.collections()}:
            store.add_folders(args.name, folders)
        else:
            documents.create(args.name, folders, args.embedding_model)
        return _run_index(documents, args.name, args.json)
    except (CollectionError, FileNotFoundError) as e:
        return _fail(str(e), 2)
    finally:
        documents.close()


def cmd_index(args: argparse.Namespace) -> int:
    from deskllm.documents.service import Documents
    from deskllm.documents.store import CollectionError

    documents = Documents(n_threads=args.threads)
    try:
        return _run_index(documents, args.name, args.json)
    except (CollectionError, FileNotFoundError) as e:
        return _fail(str(e), 2)
    finally:
        documents.close()


def cmd_list(args: argparse.Namespace) -> int:
    with _store() as store:
        collections = store.collections()
    if args.json:
        print(json.dumps({"collections": [
            {"name": c.name, "folders": list(c.folders), "files": c.files, "chunks": c.chunks,
             "skipped": c.skipped, "embedding_model": c.embedding_model, "dims": c.dims}
            for c in collections
        ]}))  # fmt: skip
        return 0
    if not collections:
        print("No collections yet: deskllm docs add NAME FOLDER...")
    for c in collections:
        print(f"{c.name}: {c.files} files, {c.chunks} chunks"
              + (f", {c.skipped} skipped" if c.skipped else "")
              + f" — {', '.join(c.folders)}")  # fmt: skip
    return 0


def cmd_skipped(args: argparse.Namespace) -> int:
    from deskllm.documents.store import CollectionError

    with _store() as store:
        try:
            skipped = store.skipped(store.get(args.name))
        except CollectionError as e:
            return _fail(str(e), 2)
    for path, reason in skipped:
        print(f"{path}: {reason}")
    return 0


def open_search(documents, names: str) -> list:
    """The collections named (comma-separated), all of one embedding model (their vectors are
    compared with one query's)."""
    store = documents.store()
    collections = [store.get(n.strip()) for n in names.split(",") if n.strip()]
    if len({c.embedding_model for c in collections}) > 1:
        raise ValueError("these collections were indexed with different embedding models; "
                         "search them one at a time")  # fmt: skip
    return collections


def cmd_search(args: argparse.Namespace) -> int:
    from deskllm.documents.service import Documents
    from deskllm.documents.store import CollectionError

    documents = Documents()
    try:
        collections = open_search(documents, args.name)
        hits = documents.search(collections, args.query, args.k, args.mode)
    except (CollectionError, ValueError, FileNotFoundError) as e:
        return _fail(str(e), 2)
    finally:
        documents.close()
    if args.json:
        print(json.dumps({"query": args.query, "mode": args.mode,
                          "hits": [h.as_json() for h in hits]}))  # fmt: skip
        return 0
    if not hits:
        print("Nothing matches.")
    for hit in hits:
        text = " ".join(hit.chunk.text.split())
        print(f"[{hit.number}] {hit.label()}\n    {text[:300]}{'…' if len(text) > 300 else ''}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from deskllm.documents.store import CollectionError

    with _store() as store:
        try:
            store.remove(args.name)
        except CollectionError as e:
            return _fail(str(e), 2)
    print(f"Removed the collection {args.name!r} and its index (your files are untouched).")
    return 0


class ChatDocs:
    """`deskllm chat --docs NAME`: each question searches the collections; the passages go
    into the prompt, and are printed as numbered sources under the reply."""

    def __init__(self, names: str) -> None:
        from deskllm.documents.service import Documents
        from deskllm.documents.store import CollectionError

        self.documents = Documents()
        try:
            self.collections = open_search(self.documents, names)
            for collection in self.collections:  # a missing model is said now, not mid-chat
                self.documents.engine_of(collection)
        except (CollectionError, ValueError, FileNotFoundError) as e:
            self.documents.close()
            raise SystemExit(f"deskllm: --docs: {e}") from None
        self.last: list = []

    def __call__(self, _conversation_id: str, question: str) -> list:
        self.last = self.documents.search(self.collections, question)
        return self.last

    def print_sources(self) -> None:
        if self.last:
            print("Sources:", file=sys.stderr)
            for hit in self.last:
                print(f"  [{hit.number}] {hit.label()}", file=sys.stderr)
        self.last = []

    def close(self) -> None:
        self.documents.close()
