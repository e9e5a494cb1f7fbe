"""docs/server.md's endpoint table names exactly the routes `deskllm serve` has, so it cannot
go stale: a route added, moved or removed fails here until the table says so."""

from __future__ import annotations

import re
from pathlib import Path

from deskllm.engine.domain import LoadParams
from deskllm.server import ModelHost, ServerConfig, create_app

try:  # newer FastAPI keeps included routers nested and walks them with this
    from fastapi.routing import iter_route_contexts
except ImportError:  # older FastAPI copies an included router's routes into the app's list

    def iter_route_contexts(routes):
        return routes


DOC = Path(__file__).parents[2] / "docs" / "server.md"
# Swagger UI's own OAuth helper page: part of /docs, not a route anyone calls.
UNDOCUMENTED = {("GET", "/docs/oauth2-redirect")}


def documented_routes() -> set[tuple[str, str]]:
    """The rows of the table under '## Endpoints': '`GET /a`, `/b`' is GET /a and GET /b."""
    section = DOC.read_text(encoding="utf-8").split("\n## Endpoints\n", 1)[1]
    routes: set[tuple[str, str]] = set()
    for line in section.split("\n\n", 1)[0].splitlines()[2:]:  # below the header row
        method = None
        for item in re.findall(r"`([^`]+)`", line.split("|")[1]):
            method, _, path = item.rpartition(" ") if " " in item else (method, "", item)
            routes.add((method, path))
    return routes


def served_routes() -> set[tuple[str, str]]:
    host = ModelHost(LoadParams("unused.gguf"), "unused", max_queue=1)  # never loaded
    app = create_app(host, ServerConfig(), load_on_start=False)
    return {
        (method, context.path)
        for context in iter_route_contexts(app.routes)
        for method in context.methods or ()
        if method != "HEAD"  # Starlette adds it to every GET
    } - UNDOCUMENTED


def test_the_endpoint_table_lists_every_route_and_only_them():
    documented, served = documented_routes(), served_routes()
    assert documented, "no endpoint table found under '## Endpoints'"
    assert served - documented == set(), "routes missing from docs/server.md's table"
    assert documented - served == set(), "rows of docs/server.md's table that are no route"
