"""Which copy of libggml/libllama deskllm opens: the one already in memory, so that ggml's
backend registry is the one libllama uses (a wheel ships libggml.so and libggml.so.0 as two
files; opening the other one gives a second, empty registry and every model is refused)."""

from __future__ import annotations

from pathlib import Path

from deskllm.llamacpp.libraries import _mapped_copy

LIB = Path("/opt/engine/llama_cpp/lib")


def test_the_copy_in_memory_from_the_library_folder_wins():
    mapped = [f"{LIB}/libggml-base.so.0", "/elsewhere/libggml.so.0", f"{LIB}/libggml.so.0",
              f"{LIB}/libllama.so.0"]  # fmt: skip
    assert _mapped_copy(mapped, LIB, "ggml") == f"{LIB}/libggml.so.0"
    assert _mapped_copy(mapped, LIB, "llama") == f"{LIB}/libllama.so.0"


def test_a_frozen_apps_top_folder_copy_is_used_when_the_folder_has_none_loaded():
    mapped = ["/opt/deskllm/_internal/libggml.so.0", f"{LIB}/libggml-cpu-zen4.so"]
    assert _mapped_copy(mapped, LIB, "ggml") == "/opt/deskllm/_internal/libggml.so.0"


def test_other_platforms_names_match_and_other_ggml_libraries_do_not():
    assert _mapped_copy(["/app/libggml.0.dylib"], LIB, "ggml") == "/app/libggml.0.dylib"
    assert _mapped_copy(["C:/app/ggml.dll"], LIB, "ggml") == "C:/app/ggml.dll"
    not_ggml = [f"{LIB}/libggml-base.so.0", f"{LIB}/libggml-vulkan.so", f"{LIB}/libggmlx.so"]
    assert _mapped_copy(not_ggml, LIB, "ggml") is None
    assert _mapped_copy([], LIB, "ggml") is None
