"""Chat with documents, measured: indexing speed, re-indexing after a few changes, search
latency at 20,000 chunks, retrieval quality, and the app's start with a large index. Prints one
JSON object.

    .venv/bin/python bench/docs.py [--files 1000] [--threads 2] [--chunks 20000] [--rounds 3]

- Indexing: a fixed corpus this script writes (1,000 Markdown files of ~5 KB, English words
  drawn from the project's README with its word frequencies, seed 0), embedded with
  all-MiniLM-L6-v2 on `--threads` engine threads: `index_s`, `chunks_per_s`. Then 10 files
  change and the collection is indexed again: `reindex_over_first` (target <= 0.05).
- Search: the index is grown to `--chunks` chunks by copying its files' chunks (their real
  text and vectors) under new paths; one search = the query's embedding + BM25 + the vector
  KNN + fusion, as the chat runs it: `search_p95_ms` (target <= 100), over 100 queries.
- Quality: the project's own docs (README.md, docs/, bench/ and packaging/ READMEs) and the
  question set bench/docs_questions.json (each question's answer is a phrase of one file): a
  hit is a top-5 passage holding the answer. `recall5_hybrid` (target: >= both others),
  `recall5_bm25`, `recall5_vector`.
- Start: the app's launch-to-window time with that 20,000-chunk database against an empty
  one, side by side, `--rounds` each: `window_open_over_empty` (target <= 1.1).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PROJECT_DOCS = ["README.md", "docs/architecture.md", "docs/server.md", "docs/scale-out.md",
                "bench/README.md", "packaging/README.md"]  # fmt: skip


def write_corpus(folder: Path, files: int, size: int = 5000, seed: int = 0) -> int:
    """`files` Markdown files of about `size` bytes; returns the bytes written."""
    words = re.findall(r"[A-Za-z][a-z]{2,}", (ROOT / "README.md").read_text())
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(files):
        parts = [f"# Notes {i:04d}: {' '.join(rng.choices(words, k=3))}\n\n"]
        while sum(map(len, parts)) < size:
            if rng.random() < 0.05:
                parts.append(f"\n\n## {' '.join(rng.choices(words, k=2)).title()}\n\n")
            sentence = " ".join(rng.choices(words, k=rng.randint(8, 20))).capitalize() + "."
            parts.append(sentence + (" " if rng.random() < 0.8 else "\n\n"))
        text = "".join(parts)
        (folder / f"notes-{i:04d}.md").write_text(text)
        total += len(text)
    return total


def grow(store, collection, target_chunks: int) -> int:
    """Copy the collection's files (chunks, BM25 rows, vectors) under new paths until it holds
    `target_chunks` chunks: real text and real vectors, at the size the target names."""
    conn = store.conn
    table = store._vectors_table(collection.dims)
    originals = conn.execute(
        "select id, path, size, mtime_ns, n_chunks from doc_files "
        "where collection_id = ? and status = 'indexed' order by id", (collection.id,)
    ).fetchall()
    count = conn.execute("select count(*) from doc_chunks").fetchone()[0]
    copy = 0
    while count < target_chunks:
        copy += 1
        conn.execute("begin immediate")
        for file_id, path, size, mtime_ns, n_chunks in originals:
            if count >= target_chunks:
                break
            new_file = conn.execute(
                "insert into doc_files(collection_id, path, size, mtime_ns, status, n_chunks, "
                "indexed_at) values (?, ?, ?, ?, 'indexed', ?, ?)",
                (collection.id, f"{path}.copy{copy}", size, mtime_ns, n_chunks, time.time()),
            ).lastrowid
            for chunk_id, ordinal, text, page, heading, start, end in conn.execute(
                "select id, ordinal, text, page, heading, start, end from doc_chunks "
                "where file_id = ?", (file_id,)
            ).fetchall():
                new_chunk = conn.execute(
                    "insert into doc_chunks(file_id, ordinal, text, page, heading, start, end) "
                    "values (?, ?, ?, ?, ?, ?, ?)",
                    (new_file, ordinal, text, page, heading, start, end),
                ).lastrowid
                vector = conn.execute(f"select embedding from {table} where chunk_id = ?",
                                      (chunk_id,)).fetchone()[0]  # fmt: skip
                conn.execute(f"insert into {table}(chunk_id, collection_id, embedding) "
                             "values (?, ?, ?)", (new_chunk, collection.id, vector))  # fmt: skip
                count += 1
        conn.execute("commit")
    return count


def recall(store, collection, embed, questions: list[dict], mode: str) -> float:
    from deskllm.documents.search import search

    def flat(text: str) -> str:
        return " ".join(text.split())

    found = 0
    for q in questions:
        hits = search(store, [collection], q["question"], embed, top_k=5, mode=mode)
        found += any(flat(q["answer"]) in flat(h.chunk.text) for h in hits)
    return found / len(questions)


def window_times(db_path: Path, empty_db: Path, rounds: int) -> dict[str, float]:
    from startup import display, launch

    base = {k: v for k, v in os.environ.items() if not k.startswith(("QT_", "DESKLLM_"))}
    cmd = [sys.executable, str(ROOT / "main.py")]
    runs: dict[str, list[float]] = {"full": [], "empty": []}
    with display() as (env, _platform):
        launch(cmd, base | env, database=empty_db)  # warms the page cache
        for _ in range(rounds):
            runs["empty"].append(launch(cmd, base | env, database=empty_db)[0])
            runs["full"].append(launch(cmd, base | env, database=db_path)[0])
    return {name: statistics.median(values) for name, values in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=100)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deskllm-bench-docs-"))
    os.environ["DESKLLM_HOME"] = str(work / "home")
    from deskllm import paths
    from deskllm.documents.embeddings import EmbeddingEngine
    from deskllm.documents.indexer import Indexer
    from deskllm.documents.search import search
    from deskllm.documents.store import DocumentStore

    report: dict[str, object] = {"files": opts.files, "threads": opts.threads}
    try:
        corpus = work / "corpus"
        report["corpus_bytes"] = write_corpus(corpus, opts.files)
        empty_db = work / "empty.sqlite3"
        DocumentStore(empty_db).close()
        with DocumentStore() as store, EmbeddingEngine(n_threads=opts.threads) as engine:
            report["embedding_model"] = engine.name
            store.create("corpus", [corpus], engine.name, engine.dims)
            first = Indexer(store, engine.embed).index(store.get("corpus"))
            report["index_s"] = round(first.elapsed_s, 2)
            report["chunks"] = first.chunks
            report["chunks_per_s"] = round(first.chunks_per_s, 1)
            rng = random.Random(1)
            for path in rng.sample(sorted(corpus.iterdir()), 10):
                with path.open("a") as f:
                    f.write("\nA line added after the first index.\n")
            again = Indexer(store, engine.embed)
            second = again.index(store.get("corpus"))
            assert len(again.read_paths) == 10, again.read_paths
            report["reindex_s"] = round(second.elapsed_s, 3)
            report["reindex_over_first"] = round(second.elapsed_s / first.elapsed_s, 4)

            for doc in PROJECT_DOCS:  # the files themselves, not their whole folders
                copied = work / "project" / doc.replace("/", "__")
                copied.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / doc, copied)
            store.create("project", [work / "project"], engine.name, engine.dims)
            Indexer(store, engine.embed).index(store.get("project"))
            questions = json.loads((ROOT / "bench" / "docs_questions.json").read_text())
            questions = questions["questions"]
            for mode in ("hybrid", "bm25", "vector"):
                report[f"recall5_{mode}"] = round(
                    recall(store, store.get("project"), engine.embed_query, questions, mode), 3)
            report["questions"] = len(questions)

            report["search_chunks"] = grow(store, store.get("corpus"), opts.chunks)
            texts = [p.read_text().split("\n")[2][:80] for p in sorted(corpus.iterdir())[:50]]
            queries = [q["question"] for q in questions] + [" ".join(t.split()[:6]) for t in texts]
            queries = (queries * (opts.queries // len(queries) + 1))[: opts.queries]
            collection = store.get("corpus")
            search(store, [collection], "warm up", engine.embed_query)
            latencies = []
            for query in queries:
                started = time.perf_counter()
                search(store, [collection], query, engine.embed_query)
                latencies.append((time.perf_counter() - started) * 1000)
            latencies.sort()
            report["search_p50_ms"] = round(statistics.median(latencies), 1)
            report["search_p95_ms"] = round(latencies[int(0.95 * (len(latencies) - 1))], 1)
            store.conn.execute("pragma wal_checkpoint(truncate)")
        full_db = paths.database_path()
        report["database_mb"] = round(full_db.stat().st_size / 1e6, 1)
        windows = window_times(full_db, empty_db, opts.rounds)
        report["window_open_s"] = round(windows["full"], 3)
        report["window_open_empty_s"] = round(windows["empty"], 3)
        report["window_open_over_empty"] = round(windows["full"] / windows["empty"], 3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
