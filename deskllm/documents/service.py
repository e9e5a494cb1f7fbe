"""Documents: the app's one way to its collections from any thread (the window's indexing, the
chat's retrieval): one embedding engine, started on first use and shared (its client is
thread-safe), and a store connection per thread (SQLite connections belong to their thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from deskllm.documents.chunking import TOKEN
from deskllm.documents.embeddings import EmbeddingEngine
from deskllm.documents.indexer import IndexControl, Indexer, IndexProgress
from deskllm.documents.readers import Skip, read_document
from deskllm.documents.search import Hit, search
from deskllm.documents.store import Collection, DocumentStore, StoredChunk, attachments_name

# Chat models' tokenizers cut text finer than the chunker counts (about 1.3 of theirs to one).
MODEL_TOKENS_PER_TOKEN = 1.3


class Documents:
    def __init__(self, db_path: Path | None = None, n_threads: int = 0) -> None:
        self.db_path = db_path
        self.n_threads = n_threads
        self._local = threading.local()
        self._stores: list[DocumentStore] = []
        self._engine: EmbeddingEngine | None = None
        self._lock = threading.Lock()

    def store(self) -> DocumentStore:
        """This thread's connection."""
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = DocumentStore(self.db_path)
            with self._lock:
                self._stores.append(store)
        return store

    def engine(self) -> EmbeddingEngine:
        with self._lock:
            if self._engine is None:
                self._engine = EmbeddingEngine(n_threads=self.n_threads)
            return self._engine

    def embed(self, texts: list[str]) -> list[tuple[float, ...]]:
        return self.engine().embed(texts)

    def create(self, name: str, folders: list[Path]) -> None:
        engine = self.engine()
        self.store().create(name, folders, engine.name, engine.dims)

    def index(
        self,
        name: str,
        on_progress: Callable[[IndexProgress], None] | None = None,
        control: IndexControl | None = None,
    ) -> IndexProgress:
        store = self.store()
        return Indexer(store, self.embed, on_progress, control).index(store.get(name))

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
            engine = self.engine()
            store.create(name, list(paths), engine.name, engine.dims, attached=True)
        else:
            store.add_folders(name, list(paths))
        return Indexer(store, self.embed, on_progress).index(store.get(name))

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
        hits = search(store, collections, question, self.embed) if collections else []
        return [replace(hit, number=n) for n, hit in enumerate(whole + hits, start=1)]

    def close(self) -> None:
        with self._lock:
            engine, self._engine = self._engine, None
            stores, self._stores = self._stores, []
        if engine is not None:
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
