"""RemoteClient over real sockets on 127.0.0.1: a server that accepts and never answers, one
that does not accept at all, nothing listening, and small scripted HTTP servers that stream
SSE the way OpenAI-compatible servers do (and cut off, dribble or fail). The real servers
(llama-cpp-python's, deskllm serve) are in tests/integration/test_remote_engines.py."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from deskllm.engine.domain import ChatMessage, Sampling
from deskllm.engine.errors import ErrorKind
from deskllm.remote.client import RemoteClient
from deskllm.remote.endpoint import Endpoint
from deskllm.remote.pool import RemotePool

HI = [ChatMessage("user", "hi")]
KEY = "sk-unit-94f1"


@contextmanager
def tcp_server(handle: Callable[[socket.socket], None], port: int = 0) -> Iterator[str]:
    """A threaded TCP server on `port` (0: a free one) running `handle(conn)` per
    connection; yields its base URL."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            handle(self.request)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def read_request(conn: socket.socket) -> tuple[str, dict]:
    """The request line and JSON body of one HTTP/1.1 request."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head.split(b"\r\n")[0].decode(), json.loads(body) if body else {}


def sse_head(conn: socket.socket) -> None:
    # Connection: close, as each handler closes after one response: a client must not reuse
    # the connection (reusing one this server just closed fails as "disconnected").
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip


def send_chunk(conn: socket.socket, text: str) -> None:
    data = text.encode()
    conn.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def delta(content: str | None = None, finish: str | None = None, **extra) -> str:
    choice = {"index": 0, "delta": {} if content is None else {"content": content},
              "finish_reason": finish}  # fmt: skip
    return "data: " + json.dumps({"choices": [choice], **extra}) + "\n\n"


def client(url: str, key: str | None = KEY, name: str = "unit", **timeouts) -> RemoteClient:
    return RemoteClient(Endpoint(name, url, "llama-server", **timeouts), key)


def test_a_full_stream_gives_text_usage_and_speed():
    seen: dict = {}

    def handle(conn):
        seen["line"], seen["body"] = read_request(conn)
        sse_head(conn)
        send_chunk(conn, ": ping\n\n")  # a comment line, as sse-starlette sends
        for word in ("Hello", ",", " world"):
            send_chunk(conn, delta(word))
            time.sleep(0.02)
        send_chunk(conn, delta(finish="stop"))
        usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                 "prompt_tokens_details": {"cached_tokens": 8}}  # fmt: skip
        send_chunk(conn, "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n")
        send_chunk(conn, "data: [DONE]\n\n")
        send_chunk(conn, "")

    with tcp_server(handle) as url:
        reply = client(url).chat("m", HI, Sampling(max_tokens=7, seed=3, stop=("END",)))
        assert list(reply) == ["Hello", ",", " world"]
    assert reply.text == "Hello, world" and reply.finish_reason == "stop"
    m = reply.metrics
    assert (m.prompt_tokens, m.cached_tokens, m.evaluated_tokens) == (12, 8, 4)
    assert m.generated_tokens == 3 and m.tg_tps > 0 and m.ttft_s > 0
    assert m.engine == "unit" and m.device == "remote"
    body = seen["body"]
    assert seen["line"] == "POST /v1/chat/completions HTTP/1.1"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["seed"], body["stop"]) == (7, 3, ["END"])
    assert "top_k" in body  # llama-server takes llama.cpp's sampling fields


def test_a_server_that_never_answers_hits_the_read_timeout():
    stop = threading.Event()

    def handle(conn):
        stop.wait(30)  # accepted, never answered

    with tcp_server(handle) as url:
        started = time.monotonic()
        reply = client(url, read_timeout_s=0.5).chat("m", HI).wait()
        stop.set()
    assert reply.error.kind == ErrorKind.TIMEOUT
    assert reply.error.reason == "endpoint unit sent nothing for 0.5 s (read timeout)"
    assert time.monotonic() - started < 10


def test_a_server_that_does_not_accept_hits_the_connect_timeout():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        # Fill the accept queue: further handshakes are not completed, as on a dead host.
        fillers = []
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        time.sleep(0.2)
        reply = client(f"http://127.0.0.1:{port}/v1", connect_timeout_s=0.5).chat("m", HI).wait()
        for s in fillers:
            s.close()
    assert reply.error.kind == ErrorKind.TIMEOUT
    assert "connect timeout" in reply.error.reason and "unit" in reply.error.reason


def test_nothing_listening_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and closed again below: nothing listens there
    reply = client(f"http://127.0.0.1:{port}/v1", name="gone").chat("m", HI).wait()
    assert reply.error.kind == ErrorKind.UNREACHABLE
    assert reply.error.reason.startswith(f"endpoint gone is unreachable at http://127.0.0.1:{port}")


def test_a_cut_stream_keeps_the_text_and_says_the_connection_dropped():
    def handle(conn):
        read_request(conn)
        sse_head(conn)
        send_chunk(conn, delta("partial"))
        send_chunk(conn, delta(" text"))
        conn.shutdown(socket.SHUT_RDWR)  # no final chunk, no [DONE]

    with tcp_server(handle) as url:
        reply = client(url).chat("m", HI).wait()
    assert reply.text == "partial text" and reply.done is None
    assert reply.error.kind == ErrorKind.DROPPED
    assert reply.error.reason.startswith("endpoint unit dropped the connection mid-reply")


def test_cancel_closes_the_stream_of_a_server_still_talking():
    closed = threading.Event()

    def handle(conn):
        read_request(conn)
        sse_head(conn)
        try:
            for _ in range(600):
                send_chunk(conn, delta("tick "))
                time.sleep(0.05)
        except OSError:
            closed.set()  # the client went away

    with tcp_server(handle) as url:
        reply = client(url).chat("m", HI)
        for n, _ in enumerate(reply, 1):
            if n == 3:
                reply.cancel()
        assert reply.finish_reason == "cancelled" and reply.text.startswith("tick tick tick")
        assert closed.wait(10)


def test_refused_key_and_server_errors_name_the_endpoint():
    def handle(conn):
        line, _ = read_request(conn)
        if "models" in line:
            body = json.dumps({"detail": f"bad key {KEY}"}).encode()  # an echo of the key
            status = b"401 Unauthorized"
        else:
            body = json.dumps({"error": {"message": "model 'm' not found"}}).encode()
            status = b"404 Not Found"
        conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                     + b"Connection: close\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip

    with tcp_server(handle) as url:
        c = client(url, name="lab")
        with pytest.raises(Exception) as info:
            c.list_models()
        assert str(info.value) == "endpoint lab refused the API key (401)"
        reply = c.chat("m", HI).wait()
        assert reply.error.kind == ErrorKind.REMOTE
        assert reply.error.reason == "endpoint lab answered 404: model 'm' not found"
        assert not client(url, key=None, name="lab").healthy()


def test_an_error_mid_stream_is_reported_with_its_message():
    def handle(conn):
        read_request(conn)
        sse_head(conn)
        send_chunk(conn, delta("so far"))
        send_chunk(conn, "data: " + json.dumps({"error": {"message": "engine died"}}) + "\n\n")
        send_chunk(conn, "data: [DONE]\n\n")
        send_chunk(conn, "")

    with tcp_server(handle) as url:
        reply = client(url).chat("m", HI).wait()
    assert reply.text == "so far"
    assert reply.error.reason == "endpoint unit reported an error mid-reply: engine died"


def test_a_pool_sends_to_the_least_busy_and_skips_a_dead_member():
    answered: list[str] = []

    def server_named(name: str):
        def handle(conn):
            read_request(conn)
            answered.append(name)
            sse_head(conn)
            send_chunk(conn, delta(name, finish="stop") + "data: [DONE]\n\n")
            send_chunk(conn, "")

        return handle

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with tcp_server(server_named("a")) as a, tcp_server(server_named("b")) as b:
        pool = RemotePool("m", [client(dead, name="dead"), client(a, name="a"),
                                client(b, name="b")], recheck_s=60)  # fmt: skip
        first = pool.chat(HI)
        assert first.wait().text in ("a", "b")  # the dead one was tried, marked, skipped
        assert not pool.members[0].healthy and first.metrics.engine in ("a", "b")
        # Two replies held open at once go to different members.
        held = [pool.pick(), pool.pick()]
        assert {m.client.name for m in held} == {"a", "b"}
        for m in held:
            pool.release(m)
        for _ in range(4):
            assert pool.chat(HI).wait().ok
    assert "dead" not in answered and len(answered) == 5


def test_a_member_that_comes_back_passes_its_health_check_and_is_used_again():
    def handle(conn):
        line, _ = read_request(conn)
        if "models" in line:
            body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         + b"Connection: close\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
            return
        sse_head(conn)
        send_chunk(conn, delta("back", finish="stop") + "data: [DONE]\n\n")
        send_chunk(conn, "")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tcp_server(handle) as other:
        pool = RemotePool("m", [client(f"http://127.0.0.1:{port}/v1", name="late"),
                                client(other, name="other")], recheck_s=0)  # fmt: skip
        assert pool.chat(HI).wait().metrics.engine == "other"
        assert not pool.members[0].healthy
        with tcp_server(handle, port):  # the same address, answering now
            assert pool.chat(HI).wait().metrics.engine == "late"  # checked, healthy, first
        assert pool.members[0].healthy
