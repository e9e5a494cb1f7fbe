"""Chat with documents, end to end with real parts: all-MiniLM-L6-v2 converted from its PyPI
wheel and run by the engine, the app's SQLite with FTS5 and sqlite-vec, real files."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from document_helpers import encrypted_pdf, pdf_bytes

from deskllm.database.connection import sqlite
from deskllm.documents.embedding_model import _read_safetensors, minilm_zip_path
from deskllm.documents.embeddings import EmbeddingEngine
from deskllm.documents.indexer import Indexer, scan_folders
from deskllm.documents.search import search
from deskllm.documents.store import DocumentStore

CLI = [sys.executable, "-m", "deskllm"]
COLOURS = ["red", "blue", "green", "amber", "violet", "silver", "black", "white", "golden", "grey"]
ANIMALS = ["heron", "otter", "badger", "falcon", "beaver", "lynx", "stoat", "marten", "crane",
           "newt", "vole", "ibis", "tern", "hare", "wren", "finch", "gecko", "moose", "bison",
           "yak"]  # fmt: skip


@pytest.fixture(autouse=True)
def _embedding_model(embedding_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKLLM_EMBEDDING_MODEL", str(embedding_model))


@pytest.fixture(scope="module")
def embedder(embedding_model: Path):
    with EmbeddingEngine(embedding_model, n_threads=2) as engine:
        yield engine


def write_corpus(folder: Path, n: int = 200) -> dict[str, str]:
    """`n` files, each about one creature of one town, with one fact only it holds."""
    folder.mkdir(parents=True, exist_ok=True)
    facts = {}
    for i in range(n):
        colour, animal = COLOURS[i % len(COLOURS)], ANIMALS[i // len(COLOURS) % len(ANIMALS)]
        town = f"Town{i:03d}"
        fact = f"The {colour} {animal} of {town} guards the well and eats {i + 3} apples a day."
        body = (f"# Notes on {town}\n\n{town} is a village by the river. Its market opens on "
                f"Tuesdays and the bakery sells rye bread.\n\n## Wildlife\n\n{fact}\n")  # fmt: skip
        path = folder / f"{town.lower()}.md"
        path.write_text(body)
        facts[str(path)] = fact
    return facts


def bert_reference(zip_path: Path, words: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2's sentence embedding computed in numpy from the safetensors, as
    sentence-transformers does it (BERT, mean pooling, unit length)."""
    with zipfile.ZipFile(zip_path) as zf:
        config = json.loads(zf.read("config.json"))
        vocab = json.loads(zf.read("tokenizer.json"))["model"]["vocab"]
        w = {k: v.astype(np.float64) for k, v in _read_safetensors(zf.read("model.safetensors"))
             .items() if v.dtype.kind == "f"}  # fmt: skip
    ids = [vocab["[CLS]"], *(vocab[word] for word in words), vocab["[SEP]"]]
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]

    def norm(x, name):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def dense(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    erf = np.vectorize(math.erf)
    h = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][: len(ids)]
         + w["embeddings.token_type_embeddings.weight"][0])  # fmt: skip
    h = norm(h, "embeddings.LayerNorm")
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        n, d = len(ids), h.shape[1] // heads
        q, k, v = (dense(h, p + f"attention.self.{x}").reshape(n, heads, d).transpose(1, 0, 2)
                   for x in ("query", "key", "value"))  # fmt: skip
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(n, -1)
        h = norm(h + dense(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        up = dense(h, p + "intermediate.dense")
        h = norm(h + dense(up * 0.5 * (1 + erf(up / math.sqrt(2))), p + "output.dense"),
                 p + "output.LayerNorm")  # fmt: skip
    pooled = h.mean(0)
    return pooled / np.linalg.norm(pooled)


def test_the_converted_gguf_embeds_as_the_original_model_does(embedder: EmbeddingEngine) -> None:
    words = ["the", "cat", "sits", "on", "the", "mat", "."]
    reference = bert_reference(minilm_zip_path(), words)
    ours = np.array(embedder.embed(["The cat sits on the mat."])[0])
    assert embedder.dims == 384
    assert float(ours @ reference) > 0.999  # F16 weights, llama.cpp's GELU: not bit-equal
    other = np.array(embedder.embed(["Quarterly revenue grew by ten percent."])[0])
    assert float(ours @ other) < 0.3


def index(store: DocumentStore, embedder: EmbeddingEngine, name: str, folders) -> Indexer:
    if name not in {c.name for c in store.collections()}:
        store.create(name, folders, embedder.name, embedder.dims)
    indexer = Indexer(store, embedder.embed)
    indexer.index(store.get(name))
    return indexer


def test_a_fact_in_one_of_200_files_is_found_and_the_reply_cites_it(
    tmp_path: Path, embedder: EmbeddingEngine, engine
) -> None:
    from deskllm.store import ConversationStore, open_database
    from deskllm.store.chat_session import ChatSession
    from deskllm.store.export import conversation_markdown

    facts = write_corpus(tmp_path / "notes")
    with DocumentStore() as store:
        index(store, embedder, "notes", [tmp_path / "notes"])
        collection = store.get("notes")
        assert (collection.files, collection.skipped) == (200, 0)
        target = str(tmp_path / "notes" / "town137.md")
        question = "How many apples does the white hare of Town137 eat?"
        assert "white hare of Town137" in facts[target]
        hits = search(store, [collection], question, embedder.embed_query)
        assert target in [h.chunk.path for h in hits[:5]]
        assert hits[0].chunk.heading == "Notes on Town137 › Wildlife"
        # Each list alone, too (the benchmark measures their recall on a question set).
        vector = search(store, [collection], question, embedder.embed_query, mode="vector")
        assert target in [h.chunk.path for h in vector]

        conversations = ConversationStore(open_database())
        conversation = conversations.create("docs", "", "starter", {})
        retrieve = lambda _conversation, q: search(store, [collection], q, embedder.embed_query)  # noqa: E731
        session = ChatSession(engine, conversations, retrieve)
        reply = session.send(conversation.id, question)
        reply.wait()
        stored = conversations.messages(conversation.id)[-1]
        assert stored.status == "complete" and stored.content
        sources = stored.metrics["sources"]
        assert target in [s["path"] for s in sources]
        cited = next(s for s in sources if s["path"] == target)
        assert facts[target] in cited["text"] and cited["number"] >= 1
        # The stored question is what the user typed; the passages went only to the model.
        assert conversations.messages(conversation.id)[-2].content == question
        exported = conversation_markdown(conversations, conversation.id)
        assert "Sources:" in exported and f"`{target}`" in exported


def test_only_changed_files_are_read_again_and_deleted_ones_leave_the_index(
    tmp_path: Path, embedder: EmbeddingEngine
) -> None:
    folder = tmp_path / "notes"
    write_corpus(folder, 30)
    with DocumentStore() as store:
        first = index(store, embedder, "notes", [folder])
        assert len(first.read_paths) == 30
        assert index(store, embedder, "notes", [folder]).read_paths == []  # nothing changed

        (folder / "town001.md").write_text("# Town001\n\nThe mill was rebuilt in 1850.\n")
        (folder / "new.md").write_text("# New\n\nA lighthouse stands on the cape.\n")
        (folder / "town002.md").unlink()
        (folder / "town003.md").rename(folder / "renamed.md")
        again = index(store, embedder, "notes", [folder])
        assert sorted(Path(p).name for p in again.read_paths) == [
            "new.md", "renamed.md", "town001.md"]
        collection = store.get("notes")
        assert collection.files == 30  # 30 - deleted - renamed away + renamed to + new
        paths = {h.chunk.path for h in search(store, [collection], "Town002 wildlife apples",
                                              embedder.embed_query, top_k=40)}  # fmt: skip
        assert str(folder / "town002.md") not in paths
        assert str(folder / "town003.md") not in paths
        gone = store.conn.execute(
            "select count(*) from doc_chunks c join doc_files f on f.id = c.file_id "
            "where f.path in (?, ?)", (str(folder / "town002.md"), str(folder / "town003.md"))
        ).fetchone()[0]
        assert gone == 0
        hit = search(store, [collection], "when was the mill rebuilt", embedder.embed_query)[0]
        assert hit.chunk.path == str(folder / "town001.md")
        _assert_consistent(store)


def _assert_consistent(store: DocumentStore) -> None:
    """Every chunk has its BM25 row and its vector, and nothing else is left."""
    chunks = store.conn.execute("select count(*) from doc_chunks").fetchone()[0]
    fts = store.conn.execute("select count(*) from doc_chunks_fts").fetchone()[0]
    vectors = store.conn.execute("select count(*) from doc_vectors_384").fetchone()[0]
    assert chunks == fts == vectors


def _unreadable_folder_scan(root: Path) -> dict[str, str]:
    """`scan_folders(root)` as a user who may not read `root/private` (root may read every
    folder, so as root the walk runs in a child that drops to nobody)."""
    if os.geteuid() != 0:
        return scan_folders([root]).skipped
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, then the walk, then its answer on the pipe
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, json.dumps(scan_folders([root]).skipped).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(answer)


def test_bad_inputs_are_skipped_with_reasons_and_indexing_goes_on(
    tmp_path: Path, embedder: EmbeddingEngine
) -> None:
    folder = tmp_path / "mixed"
    write_corpus(folder, 5)
    (folder / "locked.pdf").write_bytes(encrypted_pdf())
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Pages 9 0 R >> endobj\ngarbage")
    (folder / "manual.pdf").write_bytes(pdf_bytes(["The pump runs at forty litres a minute."]))
    with (folder / "huge.txt").open("wb") as f:
        f.truncate(2 * 1024**3)
    os.mkfifo(folder / "pipe.md")
    (folder / "loop1").symlink_to(folder / "loop2")
    (folder / "loop2").symlink_to(folder / "loop1")
    # Read last (after the notes are embedded): it has grown since the pass listed it.
    growing = folder / "zz-growing.log"
    growing.write_bytes(b"line of a log that is being written\n" * 10_000)
    stop = threading.Event()

    def keep_writing() -> None:
        with growing.open("ab") as f:
            while not stop.is_set():
                f.write(b"another line\n")
                f.flush()

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        with DocumentStore() as store:
            store.create("mixed", [folder], embedder.name, embedder.dims)
            progress = Indexer(store, embedder.embed).index(store.get("mixed"))
            collection = store.get("mixed")
            skipped = dict(store.skipped(collection))
            hit = search(store, [collection], "pump flow litres", embedder.embed_query)[0]
    finally:
        stop.set()
        writer.join()
    assert "encrypted PDF" in skipped[str(folder / "locked.pdf")]
    assert "PDF" in skipped[str(folder / "broken.pdf")]
    assert skipped[str(folder / "huge.txt")].startswith("too large (2.0 GB")
    assert skipped[str(folder / "pipe.md")].startswith("not a regular file")
    assert skipped[str(folder / "loop1")] == "a symbolic link loop"
    assert skipped[str(growing)].startswith("changed while it was read")
    assert collection.files == 6  # the five notes and the readable PDF
    assert progress.bytes_total < 10 << 20  # the 2 GB file, skipped unread, takes no time left
    assert (hit.chunk.path, hit.chunk.page) == (str(folder / "manual.pdf"), 1)

    shared = Path(tempfile.mkdtemp(prefix="deskllm-unreadable-"))
    try:
        shared.chmod(0o755)
        (shared / "open.md").write_text("readable")
        (shared / "private").mkdir(mode=0o700)
        (shared / "private" / "secret.md").write_text("hidden")
        (shared / "private").chmod(0o000)
        reasons = _unreadable_folder_scan(shared)
        assert reasons[str(shared / "private")].startswith("the folder cannot be read")
    finally:
        (shared / "private").chmod(0o700)
        subprocess.run(["rm", "-rf", str(shared)], check=True)


def test_killed_mid_index_loses_nothing_and_the_next_run_goes_on(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    write_corpus(folder, 200)
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[2])}
    process = subprocess.Popen([*CLI, "docs", "add", "many", str(folder), "--threads", "1"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # fmt: skip
    from deskllm import paths

    database = paths.database_path()
    indexed = 0
    deadline = time.monotonic() + 120
    while indexed < 20 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
        # Read-only, and only reading: the CLI is making the file and its tables meanwhile.
        with contextlib.suppress(sqlite.OperationalError), contextlib.closing(
            sqlite.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
        ) as peek:
            indexed = peek.execute("select count(*) from doc_files").fetchone()[0]
    assert process.poll() is None, process.communicate()[1]
    os.killpg(process.pid, signal.SIGKILL)  # the CLI and its engine process
    process.wait()
    with DocumentStore(database) as store:
        before = store.conn.execute("select count(*) from doc_files").fetchone()[0]
        _assert_consistent(store)
    assert 20 <= before < 200, "the kill came too late to test a resume"
    done = subprocess.run([*CLI, "docs", "index", "many", "--json"], env=env, text=True,
                          capture_output=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["files_read"] == 200 - before  # what was indexed is not read again
    with DocumentStore(database) as store:
        assert store.get("many").files == 200
        _assert_consistent(store)


def test_the_cli_adds_lists_searches_chats_and_removes(tmp_path: Path) -> None:
    write_corpus(tmp_path / "notes", 12)
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[2])}

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([*CLI, *args], env=env, text=True, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    added = json.loads(run("docs", "add", "notes", str(tmp_path / "notes"), "--json").stdout)
    assert added["files_read"] == 12 and added["chunks"] >= 12
    listed = json.loads(run("docs", "list", "--json").stdout)["collections"]
    assert [(c["name"], c["files"], c["skipped"]) for c in listed] == [("notes", 12, 0)]
    found = json.loads(run("docs", "search", "notes", "violet heron apples", "--json").stdout)
    assert found["hits"][0]["path"].endswith("town004.md")
    assert set(found["hits"][0]) >= {"number", "path", "page", "heading", "start", "end", "text"}
    chat = run("chat", "--docs", "notes", "--prompt", "What does the violet heron eat?",
               "--max-tokens", "8")  # fmt: skip
    assert "Sources:" in chat.stderr and "town004.md" in chat.stderr
    run("docs", "remove", "notes")
    assert json.loads(run("docs", "list", "--json").stdout) == {"collections": []}
    with DocumentStore() as store:
        _assert_consistent(store)
        assert store.conn.execute("select count(*) from doc_chunks").fetchone()[0] == 0
    missing = subprocess.run([*CLI, "docs", "search", "nope", "x"], env=env, text=True,
                             capture_output=True, timeout=60)  # fmt: skip
    assert missing.returncode == 2 and "no collection named 'nope'" in missing.stderr


def test_the_planner_leaves_room_for_embedding_models_not_running_yet(
    tmp_path: Path, starter_model: Path
) -> None:
    import dataclasses

    from deskllm.documents.service import Documents
    from deskllm.engine.domain import LoadParams
    from deskllm.engine.errors import EngineError, ErrorKind
    from deskllm.hardware import report_from_dict
    from deskllm.loader import ModelLoader

    write_corpus(tmp_path / "notes", 2)
    running = Documents()
    running.create("notes", [tmp_path / "notes"])
    assert running.memory_to_reserve() == 0  # running: counted in the free memory already
    running.close()
    later = Documents()  # the next start of the app: nothing runs yet
    reserve = later.memory_to_reserve()
    assert 40 << 20 < reserve < 400 << 20  # all-MiniLM-L6-v2's weights, context and buffers

    profile = Path(__file__).parents[1] / "data" / "hardware" / "desktop_cpu_16gb.json"
    report = report_from_dict(json.loads(profile.read_text(encoding="utf-8")))
    params = LoadParams(model_path=str(starter_model), n_ctx=2048, n_threads=2,
                        gpu_auto=False, n_gpu_layers=0, use_extra_bufts=False)  # fmt: skip

    def loader(available: int, **kw) -> ModelLoader:
        memory = dataclasses.replace(report.memory, available_bytes=available)
        return ModelLoader(None, hardware=dataclasses.replace(report, memory=memory), **kw)

    low, high = 1, 1 << 34  # the least free RAM the starter model is planned to fit in
    while low < high:
        mid = (low + high) // 2
        try:
            loader(mid).check(params)
            high = mid
        except EngineError:
            low = mid + 1
    loader(low).check(params)
    with pytest.raises(EngineError) as refused:
        loader(low, reserve=later.memory_to_reserve).check(params)
    assert refused.value.kind == ErrorKind.TOO_BIG
    loader(low + reserve, reserve=later.memory_to_reserve).check(params)
    later.close()
