"""Ollama's /api/pull on the Hugging Face Hub, the way Ollama pulls from it: a name of the form
`hf.co/OWNER/REPO:QUANT` (or `huggingface.co/…`; no quant, or `latest`: the planner's pick for
this machine) is downloaded by the app's downloader (resumable, sha256-verified) into the
library, its progress given as Ollama's status lines. A client that hangs up pauses the
download: pulling the same name again resumes it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

from deskllm.downloads.events import DownloadState, Progress
from deskllm.server import errors

HUB_PREFIXES = ("hf.co/", "huggingface.co/", "https://hf.co/", "https://huggingface.co/")
# pull(repo, selector, on_progress, stop) -> the final Progress (DONE, FAILED or PAUSED)
Pull = Callable[[str, str | None, Callable[[Progress], None], threading.Event], Progress]


def hub_name(name: str) -> tuple[str, str | None]:
    """(repo, quant or file) of `hf.co/OWNER/REPO[:QUANT]`; 400 for any other name."""
    for prefix in HUB_PREFIXES:
        if name.startswith(prefix):
            repo, _, selector = name[len(prefix):].partition(":")
            if repo.count("/") == 1 and all(repo.split("/")):
                return repo, (selector if selector and selector != "latest" else None)
    raise errors.bad_request(
        f"cannot pull {name!r}: deskllm pulls GGUF models from Hugging Face; name one "
        "hf.co/OWNER/REPO or hf.co/OWNER/REPO:QUANT (e.g. hf.co/bartowski/"
        "Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)", param="model")  # fmt: skip


def status_line(event: Progress) -> dict | None:
    """A download's progress as Ollama writes a layer's (None: nothing to say)."""
    if event.state == DownloadState.DOWNLOADING:
        return {"status": f"pulling {event.name}", "digest": event.name,
                "total": event.total, "completed": event.bytes_done}  # fmt: skip
    if event.state == DownloadState.VERIFYING:
        return {"status": "verifying sha256 digest"}
    return None


async def pull_lines(pull: Pull, repo: str, selector: str | None) -> AsyncIterator[dict]:
    """The status lines of one pull, ending with {"status": "success"} or {"error": …}.
    Closed early (the client hung up): the download is paused, its partial file kept."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def progress(event: Progress) -> None:
        if (line := status_line(event)) is not None:
            loop.call_soon_threadsafe(lines.put_nowait, line)

    yield {"status": "pulling manifest"}
    job = asyncio.ensure_future(asyncio.to_thread(pull, repo, selector, progress, stop))
    job.add_done_callback(lambda _f: loop.call_soon_threadsafe(lines.put_nowait, None))
    last = None
    try:
        while (line := await lines.get()) is not None:
            if line != last:  # the same figures twice say nothing new
                yield line
                last = line
        try:
            final = job.result()
        except errors.ApiError as exc:
            yield {"error": exc.message}
            return
        except Exception as exc:  # noqa: BLE001 - the client is told, in Ollama's shape
            yield {"error": str(exc) or type(exc).__name__}
            return
        if final.state != DownloadState.DONE:
            yield {"error": final.error or f"the download ended {final.state.value}"}
            return
        yield {"status": "writing manifest"}
        yield {"status": "success"}
    finally:
        stop.set()  # a client gone mid-pull: the download pauses (resumed by the next pull)
