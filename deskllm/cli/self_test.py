"""`deskllm --self-test`: check an installed (or frozen) deskllm end to end, headless.

Probes the hardware, loads the starter model in the engine process and generates a few tokens,
opens and migrates a database in a temporary home, indexes and searches two documents with the
embedding model and sqlite-vec, and starts Qt offscreen. Prints one line of
JSON and exits 0 only when every check passed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any


def _check_hardware() -> dict[str, Any]:
    from deskllm.hardware import probe_hardware

    report = probe_hardware()
    engine_devices = [d.name for d in report.engine.devices]
    if not report.engine.available:
        raise RuntimeError(f"engine not usable: {report.engine.reason}")
    return {
        "cpu": report.cpu.name,
        "engine_backends": list(report.engine.backends),
        "engine_devices": engine_devices,
        "offload_targets": [t.name for t in report.offload_targets],
        "cpu_variant": report.engine.cpu_variant,
    }


def _check_engine() -> dict[str, Any]:
    from deskllm.catalog.starter import starter_model_path
    from deskllm.engine.client import EngineClient
    from deskllm.engine.domain import ChatMessage, LoadParams, Sampling
    from deskllm.loader import ModelLoader

    model = starter_model_path()
    if model is None:
        raise RuntimeError("the starter model is not installed")
    with EngineClient() as client:
        loaded = ModelLoader(client).load(LoadParams(str(model), n_ctx=512))
        reply = client.chat(
            "self-test",
            [ChatMessage("user", "Say hello.")],
            Sampling(temperature=0.0, max_tokens=8, seed=1),
        ).wait()
        if reply.error is not None:
            raise RuntimeError(str(reply.error))
        if reply.metrics is None or reply.metrics.generated_tokens == 0:
            raise RuntimeError("the engine generated no tokens")
        return {
            "model": model.name,
            "devices": list(loaded.devices),
            "extra_bufts": loaded.use_extra_bufts,
            "tokens": reply.metrics.generated_tokens,
            "tg_tps": round(reply.metrics.tg_tps or 0.0, 1),
        }


def _check_database() -> dict[str, Any]:
    from deskllm.store import ConversationStore, open_database

    with tempfile.TemporaryDirectory(prefix="deskllm-self-test-") as tmp:
        db = open_database(os.path.join(tmp, "self-test.sqlite3"))
        store = ConversationStore(db)
        conversation = store.create("self-test")
        store.add_message(conversation.id, "user", "hello")
        ok = db.execute("PRAGMA integrity_check").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        db.close()
    if ok != "ok":
        raise RuntimeError(f"integrity_check: {ok}")
    return {"schema_version": version}


def _check_documents() -> dict[str, Any]:
    """The embedding model in its engine, sqlite-vec loaded into SQLite, and a hybrid search
    that finds the one passage that answers."""
    from pathlib import Path

    from deskllm.documents.embeddings import EmbeddingEngine
    from deskllm.documents.indexer import Indexer
    from deskllm.documents.search import search
    from deskllm.documents.store import DocumentStore

    with tempfile.TemporaryDirectory(prefix="deskllm-self-test-") as tmp:
        folder = Path(tmp, "docs")
        folder.mkdir()
        (folder / "pump.md").write_text("# Pump\n\nThe pump moves forty litres a minute.\n")
        (folder / "bread.md").write_text("# Bread\n\nRye bread bakes for an hour.\n")
        with DocumentStore(Path(tmp, "docs.sqlite3")) as store, EmbeddingEngine() as engine:
            store.create("self-test", [folder], engine.name, engine.dims)
            Indexer(store, engine.embed).index(store.get("self-test"))
            collection = store.get("self-test")
            hits = search(store, [collection], "how fast is the pump", engine.embed_query)
            vec_version = store.conn.execute("select vec_version()").fetchone()[0]
        if not hits or not hits[0].chunk.path.endswith("pump.md"):
            raise RuntimeError("the search did not find the passage that answers")
        return {"embedding_model": engine.name, "dims": engine.dims, "sqlite_vec": vec_version}


def _check_qt() -> dict[str, Any]:
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from deskllm.gui.qt import QApplication, QLabel, QTextDocument

    app = QApplication.instance() or QApplication(["deskllm-self-test"])
    QLabel("a widget").grab()  # the platform plugin really paints
    document = QTextDocument()
    document.setMarkdown("**ok** `code`")
    text = document.toPlainText()
    if "ok" not in text:
        raise RuntimeError("Qt could not render markdown")
    return {"platform": app.platformName()}


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "hardware": _check_hardware,
    "engine": _check_engine,
    "database": _check_database,
    "documents": _check_documents,
    "qt": _check_qt,
}


def run_self_test() -> int:
    result: dict[str, Any] = {"ok": True, "checks": {}}
    start = time.perf_counter()
    for name, check in CHECKS.items():
        t0 = time.perf_counter()
        try:
            entry = {"ok": True, **check()}
        except Exception as exc:  # a self-test reports every failure, it never raises
            entry = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            if os.environ.get("DESKLLM_DEBUG"):
                traceback.print_exc()
            result["ok"] = False
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        result["checks"][name] = entry
    result["seconds"] = round(time.perf_counter() - start, 2)
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    return 0 if result["ok"] else 1
