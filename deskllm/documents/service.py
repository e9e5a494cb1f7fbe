"""Documents: the app's one way to its collections from any thread (the window's indexing, the
chat's retrieval): an engine per embedding model, each started on first use and shared (its
client is thread-safe), and a store connection per thread (SQLite connections belong to their
thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from deskllm.documents.chunking import TOKEN
from deskllm.documents.embedding_model import default_embedding_model
from deskllm.documents.embeddings import EmbeddingEngine, collection_model
from deskllm.documents.indexer import IndexControl, Indexer, IndexProgress
from deskllm.documents.readers import Skip, read_document
from deskllm.documents.search import TOP_K, Hit, search
from deskllm.documents.store import Collection, DocumentStore, StoredChunk, attachments_name

# The embedding context the engine makes (engine/embedder.py's MAX_EMBED_CTX; that module
# loads llama.cpp, which the window's process does not).
EMBED_CTX = 2048
# Chat models' tokenizers cut text finer than the chunker counts (about 1.3 of theirs to one).
MODEL_TOKENS_PER_TOKEN = 1.3


class Documents:
    def __init__(self, db_path: Path | None = None, n_threads: int = 0) -> None:
        self.db_path = db_path
        self.n_threads = n_threads
        self._local = threading.local()
        self._stores: list[DocumentStore] = []
        self._engines: dict[str, EmbeddingEngine] = {}  # by model path, each started on use
        self._lock = threading.Lock()

    def store(self) -> DocumentStore:
        """This thread's connection."""
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = DocumentStore(self.db_path)
            with self._lock:
                self._stores.append(store)
        return store

    def engine(self, model: Path | None = None) -> EmbeddingEngine:
        """The engine of an embedding GGUF (default: the bundled all-MiniLM-L6-v2)."""
        path = model or default_embedding_model()
        with self._lock:
            engine = self._engines.get(str(path))
            if engine is None:
                engine = self._engines[str(path)] = EmbeddingEngine(path, self.n_threads)
            return engine

    def engine_of(self, collection: Collection) -> EmbeddingEngine:
        return self.engine(collection_model(collection.embedding_model))

    def create(self, name: str, folders: list[Path], model: Path | None = None) -> None:
        """A new collection, indexed with `model` (an embedding GGUF; default: the bundled)."""
        engine = self.engine(model)
        stored = str(engine.model_path) if model else engine.name
        self.store().create(name, folders, stored, engine.dims)

    def index(
        self,
        name: str,
        on_progress: Callable[[IndexProgress], None] | None = None,
        control: IndexControl | None = None,
    ) -> IndexProgress:
        store = self.store()
        collection = store.get(name)
        embed = self.engine_of(collection).embed
        return Indexer(store, embed, on_progress, control).index(collection)

    def attach(
        self,
        conversation_id: str,
        paths: Sequence[Path],
        on_progress: Callable[[IndexProgress], None] | None = None,
    ) -> IndexProgress:
        """Attach files to a chat: they are indexed as the chat's own collection."""
        store = self.store()
        name = attachments_name(conversation_id)
        if store.attachments(conversation_id) is None:
            engine = self.engine()  # attachments: the bundled model
            store.create(name, list(paths), engine.name, engine.dims, attached=True)
        else:
            store.add_folders(name, list(paths))
        collection = store.get(name)
        return Indexer(store, self.engine_of(collection).embed, on_progress).index(collection)

    def attached(self, conversation_id: str) -> list[str]:
        """The paths attached to a chat."""
        found = self.store().attachments(conversation_id)
        return list(found.folders) if found else []

    def detach(self, conversation_id: str) -> None:
        """Forget a chat's attachments (a deleted chat, or the user's choice)."""
        store = self.store()
        if store.attachments(conversation_id) is not None:
            store.remove(attachments_name(conversation_id))

    def retrieve(self, conversation_id: str, question: str, budget: int = 0) -> list[Hit]:
        """The passages for a question: the chat's attachments whole when they fit `budget`
        (model tokens), else searched with the collections this conversation may search. None
        chosen and nothing attached: nothing, and the embedding engine is not started."""
        store = self.store()
        collections = store.conversation_collections(conversation_id)
        attached = store.attachments(conversation_id)
        whole: list[Hit] = []
        if attached is not None and attached.files:
            whole = whole_files(store, attached, budget)
            if not whole:
                collections.append(attached)  # too long to go in whole: searched
        hits = self.search(collections, question) if collections else []
        return [replace(hit, number=n) for n, hit in enumerate(whole + hits, start=1)]

    def search(
        self, collections: list[Collection], question: str, top_k: int = TOP_K,
        mode: str = "hybrid",
    ) -> list[Hit]:
        """The best `top_k` passages of `collections`: each embedding model's collections
        searched with that model, numbered from 1 in the order of their scores."""
        store = self.store()
        groups: dict[str, list[Collection]] = {}
        for collection in collections:
            groups.setdefault(collection.embedding_model, []).append(collection)
        hits = []
        for group in groups.values():
            embed = self.engine_of(group[0]).embed_query
            hits += search(store, group, question, embed, top_k, mode)
        best = sorted(hits, key=lambda h: -h.score)[:top_k]
        return [replace(hit, number=n) for n, hit in enumerate(best, start=1)]

    def memory_to_reserve(self) -> int:
        """RAM the embedding models of the collections (and of the chats' attachments) take
        once they run, for those not running yet: the planner keeps it free when it plans a
        chat model (a running one is counted in the machine's free memory already)."""
        from deskllm.gguf.header import GgufError, read_header
        from deskllm.planner.memory import EstimateParams, estimate_memory
        from deskllm.planner.model_shape import model_shape

        rows = self.store().conn.execute("select distinct embedding_model from doc_collections")
        with self._lock:
            running = set(self._engines)
        total = 0
        for (stored,) in rows.fetchall():
            try:
                path = collection_model(stored)
                if str(path) in running or not path.is_file():
                    continue
                header = read_header(path)
                context = min(header.context_length or EMBED_CTX, EMBED_CTX)
                total += estimate_memory(model_shape(header), EstimateParams(context)).ram_bytes
            except (GgufError, FileNotFoundError, ValueError):
                continue  # a model that cannot load takes nothing
        return total

    def running_engines(self) -> list[str]:
        """The embedding models started so far (their paths)."""
        with self._lock:
            return list(self._engines)

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
            stores, self._stores = self._stores, []
        for engine in engines:
            engine.close()
        for store in stores:
            store.close()


def whole_files(store: DocumentStore, attached: Collection, budget: int) -> list[Hit]:
    """Each attached file's whole text as one source, when all of them fit `budget` model
    tokens together; [] when they do not (or a file can no longer be read)."""
    texts = []
    for path, state in sorted(store.file_states(attached).items()):
        if state.status != "indexed":
            continue
        try:
            document = read_document(Path(path))
        except (Skip, OSError):
            return []
        texts.append((path, "\n\n".join(s.text for s in document.sections).strip()))
    tokens = sum(len(TOKEN.findall(text)) for _, text in texts) * MODEL_TOKENS_PER_TOKEN
    if not texts or tokens > budget:
        return []
    return [
        Hit(0, StoredChunk(-1, path, text, None, "", 0, len(text), attached.name), 1.0, None,
            None)  # fmt: skip
        for path, text in texts
    ]
