"""Engine benchmark: the app's path against plain llama-cpp-python and a native decode loop,
measured side by side in one run on the same model and threads (this machine is shared and
noisy; only ratios from one run mean anything).

Keys (all speeds tokens/s, times seconds):
  Decode speeds are medians over --rounds rounds; their ratios are medians of the ratios
  within each round. Every path keeps the best of REPEATS runs per round.
  tg_tps          decode through client -> engine process -> events
  raw_tg_tps      a plain llama-cpp-python create_chat_completion(stream=True) loop
  native_tg_tps   llama_decode of one token at a time from ctypes, no sampling (what
                  llama-bench's tg test measures)
  pp_tps          prompt evaluation over ~1,500 tokens
  ttft_s / cached_ttft_s   turn 1 / turn 2 of a conversation with ~1,500 tokens of history
  restore_s / reeval_s     switching back to that conversation: from the KV state cache /
                           evaluating it again
  stop_decode_s   cancel() to the final event while decoding
  stop_prefill_s  cancel() to the final event while a ~3,000-token prompt is evaluated
  crash_recover_s after kill -9 of the engine mid-reply: the next request to its first text
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import statistics
import threading
import time
import uuid

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, Done, LoadParams, Sampling
from deskllm.engine.errors import ErrorKind
from deskllm.engine.reply import Reply
from deskllm.loader import ModelLoader

TG_TOKENS = 128
REPEATS = 2  # each path keeps the best of this many runs per round, all alike
_PARAGRAPH = (
    "The lighthouse keeper wrote in her log every evening: the wind's direction, the colour of "
    "the sea, the ships that passed and the birds that rested on the gallery rail. Over the "
    "years the entries grew longer, and she began to add the small things as well, the smell "
    "of the kelp after a storm, the way the lamp hummed on cold nights, and the letters that "
    "arrived on the supply boat from a brother who lived far inland. "
)


def history(turns: int = 6, seed: str = "") -> list[ChatMessage]:
    """A synthetic conversation of about 250 tokens a turn (~1,500 for 6 turns)."""
    messages = [ChatMessage("system", f"You are a helpful assistant. {seed}")]
    for i in range(turns):
        messages.append(ChatMessage("user", f"Part {i + 1} of the story, please. {seed}"))
        messages.append(ChatMessage("assistant", _PARAGRAPH * 2 + f"(end of part {i + 1})"))
    return messages


def _done(reply: Reply) -> Done:
    reply.wait()
    if reply.done is None:
        raise RuntimeError(str(reply.error))
    return reply.done


def _client_tg_tps(reply: Reply) -> float:
    """Decode tokens/s as the app sees them: from the first text the client receives to the
    end of the reply, so the pipe and the event objects are inside the measurement."""
    first = None
    for _text in reply:
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    if reply.done is None:
        raise RuntimeError(str(reply.error))
    if first is None or reply.done.metrics.generated_tokens < 2:
        raise RuntimeError("the reply was too short to time")
    return (reply.done.metrics.generated_tokens - 1) / (end - first)


def _raw_tg(queue, model_path: str, n_ctx: int, n_threads: int, extra_bufts: bool) -> None:
    """Plain llama-cpp-python, the way most apps call it."""
    from deskllm.llamacpp import build

    build.activate()
    import llama_cpp
    import llama_cpp.llama_cpp as low

    defaults = low.llama_model_default_params

    def params_without_crash():
        # llama_cpp.Llama has no switch for extra buffer types; on machines where they crash
        # the plain loop would crash too, so it gets the same setting the app uses.
        p = defaults()
        p.use_extra_bufts = extra_bufts
        return p

    low.llama_model_default_params = params_without_crash
    llm = llama_cpp.Llama(
        model_path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, verbose=False
    )
    messages = [{"role": "user", "content": "Write a long story about a lighthouse."}]
    rates = []
    for _ in range(REPEATS):
        llm.reset()
        first = None
        count = 0
        for chunk in llm.create_chat_completion(
            messages, stream=True, max_tokens=TG_TOKENS, temperature=0.0, repeat_penalty=1.0
        ):
            if "content" not in chunk["choices"][0]["delta"]:
                continue  # the role chunk and the final empty one carry no token
            count += 1
            if first is None:
                first = time.perf_counter()
        rates.append((count - 1) / (time.perf_counter() - first))
    queue.put({"tps": max(rates), "library": llama_cpp.__file__})


def _native_tg(queue, model_path: str, n_ctx: int, n_threads: int, extra_bufts: bool) -> None:
    """llama_decode of one token at a time, no sampling: llama-bench's tg test, from ctypes."""
    from deskllm.llamacpp import build

    build.activate()  # before llama_cpp is imported: the build DESKLLM_ENGINE_DIR names
    import llama_cpp as L

    from deskllm.engine.llama_model import LlamaModel

    def decode(token: int) -> None:
        one[0] = token
        rc = L.llama_decode(rt.ctx, L.llama_batch_get_one(one, 1))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} at token {token}")

    rt = LlamaModel(
        LoadParams(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads), extra_bufts
    )
    one = (L.llama_token * 1)()
    rates = []
    for _ in range(REPEATS):
        rt.clear()
        decode(1)
        start = time.perf_counter()
        for i in range(TG_TOKENS):
            decode(100 + i)
        rates.append(TG_TOKENS / (time.perf_counter() - start))
    rt.close()
    queue.put({"tps": max(rates), "library": L.__file__})


def _in_child(target, *args) -> dict:
    """Run a decode loop in a fresh process: {"tps": its best rate, "library": the llama_cpp
    it imported}."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=target, args=(queue, *args))
    child.start()
    try:
        return queue.get(timeout=600)
    finally:
        child.join(30)


def _cancel_latency(client: EngineClient, messages: list[ChatMessage], after_deltas: int,
                    after_s: float) -> float:
    """Seconds from cancel() to the Done event, cancelling after `after_deltas` text events
    (decode) or `after_s` seconds (prompt evaluation, before any text)."""
    long = Sampling(temperature=0.0, max_tokens=4096, ignore_eos=True)
    timer = None
    cancelled_at: list[float] = []

    def cancel() -> None:
        cancelled_at.append(time.perf_counter())
        client.cancel()

    if after_deltas == 0:
        timer = threading.Timer(after_s, cancel)
        timer.start()
    reply = client.chat(uuid.uuid4().hex, messages, long)
    for deltas, _text in enumerate(reply, start=1):
        if deltas == after_deltas:
            cancel()
    ended = time.perf_counter()
    if reply.done is None:
        raise RuntimeError(str(reply.error))
    if reply.finish_reason != "cancelled" or not cancelled_at:
        raise RuntimeError(f"the reply was not cancelled ({reply.finish_reason})")
    return ended - cancelled_at[0]


def _stop_and_recover(client: EngineClient) -> dict:
    out = {
        "stop_decode_s": _cancel_latency(client, [ChatMessage("user", "Tell a story.")], 16, 0),
        # ~3,000 fresh tokens take seconds to evaluate; stop 0.5 s in.
        "stop_prefill_s": _cancel_latency(client, history(12, uuid.uuid4().hex), 0, 0.5),
    }
    # kill -9 the engine mid-reply, then time the next request to its first text.
    long = Sampling(temperature=0.0, max_tokens=512, ignore_eos=True)
    crashing = client.chat("bench-crash", [ChatMessage("user", "Tell a story.")], long)
    for _text in crashing:
        if crashing.error is None and client.pid is not None:
            os.kill(client.pid, signal.SIGKILL)  # then read on to the engine's death
    if crashing.error is None or crashing.error.kind != ErrorKind.EXITED:
        raise RuntimeError(f"the engine did not die as asked ({crashing.error})")
    start = time.perf_counter()
    recovering = client.chat("bench-crash", [ChatMessage("user", "Hello!")], long)
    for _text in recovering:
        out["crash_recover_s"] = time.perf_counter() - start
        recovering.cancel()
        break
    recovering.wait()
    return out


def run_bench(params: LoadParams, rounds: int = 3) -> dict:
    """Load the model in the engine and measure every key of the module docstring."""
    result: dict = {}
    with EngineClient() as client:
        loaded = ModelLoader(client).load(params)
        p = client.params
        result.update(
            model=p.model_path,
            n_ctx=loaded.n_ctx,
            n_threads=p.n_threads,
            use_extra_bufts=p.use_extra_bufts,
        )
        tg_sampling = Sampling(
            temperature=0.0, repeat_penalty=1.0, max_tokens=TG_TOKENS, ignore_eos=True
        )
        tg, raw, native = [], [], []
        prompt = [ChatMessage("user", "Write a long story about a lighthouse.")]
        for _ in range(rounds):
            # Interleaved, and compared within each round, so that load on the machine hits
            # the paths alike.
            args = (p.model_path, loaded.n_ctx, p.n_threads, p.use_extra_bufts)
            raw.append(_in_child(_raw_tg, *args)["tps"])
            native.append(_in_child(_native_tg, *args)["tps"])
            tg.append(
                max(
                    _client_tg_tps(client.chat(uuid.uuid4().hex, prompt, tg_sampling))
                    for _ in range(REPEATS)
                )
            )
        # Medians: one round disturbed by another process on the machine does not move them.
        result.update(
            tg_tps=statistics.median(tg),
            raw_tg_tps=statistics.median(raw),
            native_tg_tps=statistics.median(native),
        )
        per_round = {
            "tg_over_raw": statistics.median(a / r for a, r in zip(tg, raw, strict=True)),
            "tg_over_native": statistics.median(a / n for a, n in zip(tg, native, strict=True)),
            "raw_over_native": statistics.median(r / n for r, n in zip(raw, native, strict=True)),
        }

        # Prompt caching over a ~1,500-token history.
        short = Sampling(temperature=0.0, max_tokens=8, ignore_eos=True)
        conv_a = history(6, "A")
        turn1 = _done(client.chat("bench-a", conv_a, short))
        result["history_tokens"] = turn1.metrics.prompt_tokens
        result["pp_tps"] = turn1.metrics.pp_tps
        result["ttft_s"] = turn1.metrics.ttft_s
        conv_a2 = conv_a + [
            ChatMessage("assistant", turn1.text),
            ChatMessage("user", "Go on."),
        ]
        turn2 = _done(client.chat("bench-a", conv_a2, short))
        result["cached_ttft_s"] = turn2.metrics.ttft_s
        result["cached_tokens"] = turn2.metrics.cached_tokens

        # Switch away to B, then back to A: the state cache restores A.
        _done(client.chat("bench-b", history(6, "B"), short))
        conv_a3 = conv_a2 + [ChatMessage("assistant", turn2.text), ChatMessage("user", "More.")]
        back = _done(client.chat("bench-a", conv_a3, short))
        result["restore_s"] = back.metrics.ttft_s
        result["restored_from"] = back.metrics.restored_from
        # The same switch with nothing cached: a conversation the cache has never seen.
        _done(client.chat("bench-b", history(6, "B"), short))
        cold = _done(client.chat(uuid.uuid4().hex, conv_a3, short))
        result["reeval_s"] = cold.metrics.ttft_s
        result.update(_stop_and_recover(client))
    result["ratios"] = {
        **per_round,
        "cached_ttft_over_ttft": result["cached_ttft_s"] / result["ttft_s"],
        "restore_over_reeval": result["restore_s"] / result["reeval_s"],
    }
    result["tg_samples"] = {"app": tg, "raw": raw, "native": native}
    return result
