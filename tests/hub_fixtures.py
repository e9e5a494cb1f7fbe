"""Fixtures for Hub tests: a real quantization ladder, a split model, and a running FakeHub.

Loaded by tests/conftest.py (`from hub_fixtures import *`), so any test can ask for:

  quant_ladder  (session) {label: Path}: the starter model requantized by llama.cpp itself
                (Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q3_K_M, Q2_K) plus the starter Q4_1; ~1.5 s each
  multipart     (session) [Path, Path]: the starter model split at a tensor boundary into
                `...-Q4_1-00001-of-00002.gguf` / `-00002-of-00002.gguf` (GGUFWriter with
                split.no / split.count / split.tensors.count, as llama.cpp's gguf-split writes)
  mmproj_file   (session) Path: a tiny valid GGUF with general.architecture "clip"
  hub           (function) a started FakeHub holding the repos below; HF_ENDPOINT points at
                it, HF_HUB_OFFLINE is unset, no token is sent unless a test passes one

Repos in `hub` (sort orders differ on purpose: downloads, likes and updated each rank them
differently):
  MAIN_REPO     bartowski/SmolLM2-135M-Instruct-GGUF   the ladder + mmproj + README.md
  UNSLOTH_REPO  unsloth/SmolLM2-135M-Instruct-GGUF     Q4_K_M renamed UD-Q4_K_XL, Q8_0
  GATED_REPO    gatedorg/SmolLM2-135M-Instruct-GGUF    gated ("manual"), one Q4_K_M
  SPLIT_REPO    splitorg/SmolLM2-135M-Instruct-GGUF    the 2-part Q4_1 in a Q4_1/ folder
                                                       + a single-file Q8_0
  PLAIN_REPO    HuggingFaceTB/SmolLM2-135M-Instruct    no GGUF at all (config.json, README)
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hub_server import FakeHub

from deskllm.llamacpp.requantize import requantize

STEM = "SmolLM2-135M-Instruct"
LADDER = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K")
STARTER_LABEL = "Q4_1"
MAIN_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
UNSLOTH_REPO = "unsloth/SmolLM2-135M-Instruct-GGUF"
GATED_REPO = "gatedorg/SmolLM2-135M-Instruct-GGUF"
SPLIT_REPO = "splitorg/SmolLM2-135M-Instruct-GGUF"
PLAIN_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
MMPROJ_NAME = f"mmproj-{STEM}-f16.gguf"
README = b"---\nlicense: apache-2.0\ntags: [gguf]\n---\n# SmolLM2-135M-Instruct GGUF\n"


@pytest.fixture(scope="session")
def quant_ladder(tmp_path_factory: pytest.TempPathFactory, starter_model: Path) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("ladder")
    paths = {label: out / f"{STEM}-{label}.gguf" for label in LADDER}
    requantize(starter_model, paths, timeout_s=300)
    paths[STARTER_LABEL] = starter_model
    return paths


def split_gguf(src: Path, dst: Path, parts: int = 2) -> list[Path]:
    """Split `src` at tensor boundaries into `dst.stem-0000i-of-0000n.gguf` files.

    The first shard keeps all metadata; every shard gets split.no (u16), split.count (u16)
    and split.tensors.count (i32), which is what llama.cpp's loader reads to find the rest.
    """
    import gguf  # test dependency only

    reader = gguf.GGUFReader(src)
    sizes = [int(t.n_bytes) for t in reader.tensors]
    # A greedy fill of total/parts + the largest tensor never needs more than `parts` shards.
    limit = math.ceil(sum(sizes) / parts) + max(sizes)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch, split_max_size=limit)
    for f in reader.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue  # the writer adds these itself
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    shards = [dst.with_name(f"{dst.stem}-{i:05d}-of-{parts:05d}.gguf") for i in range(1, parts + 1)]
    missing = [p.name for p in shards if not p.is_file()]
    assert not missing, f"split produced other files than expected: missing {missing}"
    return shards


@pytest.fixture(scope="session")
def multipart(tmp_path_factory: pytest.TempPathFactory, starter_model: Path) -> list[Path]:
    out = tmp_path_factory.mktemp("multipart")
    return split_gguf(starter_model, out / f"{STEM}-{STARTER_LABEL}.gguf", parts=2)


@pytest.fixture(scope="session")
def mmproj_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import gguf
    import numpy as np

    path = tmp_path_factory.mktemp("mmproj") / MMPROJ_NAME
    writer = gguf.GGUFWriter(path, "clip")
    writer.add_file_type(1)  # F16, as the name says
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_tensor("v.patch_embd.weight", np.zeros((16, 32), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def hub_repos(hub: FakeHub, ladder: dict[str, Path], shards: list[Path], mmproj: Path) -> None:
    """Fill `hub` with the repos the module docstring lists."""
    main_files: dict[str, Path | bytes] = {p.name: p for p in ladder.values()}
    main_files[MMPROJ_NAME] = mmproj
    main_files["README.md"] = README
    hub.add_repo(
        MAIN_REPO, main_files, downloads=5000, likes=40,
        last_modified="2026-01-10T00:00:00.000Z", tags=["text-generation"],
    )  # fmt: skip
    hub.add_repo(
        UNSLOTH_REPO,
        {
            f"{STEM}-UD-Q4_K_XL.gguf": ladder["Q4_K_M"],
            f"{STEM}-Q8_0.gguf": ladder["Q8_0"],
            "README.md": README,
        },
        downloads=9000, likes=10, last_modified="2025-12-01T00:00:00.000Z",
    )  # fmt: skip
    hub.add_repo(
        GATED_REPO, {f"{STEM}-Q4_K_M.gguf": ladder["Q4_K_M"], "README.md": README},
        gated=True, license="llama3.2", downloads=100, likes=100,
        last_modified="2026-02-01T00:00:00.000Z",
    )  # fmt: skip
    split_files: dict[str, Path | bytes] = {f"Q4_1/{p.name}": p for p in shards}
    split_files[f"{STEM}-Q8_0.gguf"] = ladder["Q8_0"]
    hub.add_repo(
        SPLIT_REPO, split_files, downloads=300, likes=5,
        last_modified="2026-01-05T00:00:00.000Z",
    )  # fmt: skip
    hub.add_repo(
        PLAIN_REPO, {"config.json": b'{"model_type": "llama"}', "README.md": b"# SmolLM2\n"},
        downloads=100000, likes=500, tags=["transformers", "safetensors"],
    )  # fmt: skip


def point_hf_at(monkeypatch: pytest.MonkeyPatch, url: str, home: Path) -> None:
    """Make huggingface_hub, already imported or not, talk to `url` and only to it.

    huggingface_hub reads HF_ENDPOINT, HF_HUB_OFFLINE and its paths once, at import, so the
    env alone is not enough in this process; subprocesses get the env."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(home))  # no real token file, no real cache
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))


@pytest.fixture
def hub(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    quant_ladder: dict[str, Path],
    multipart: list[Path],
    mmproj_file: Path,
):
    with FakeHub() as server:
        hub_repos(server, quant_ladder, multipart, mmproj_file)
        point_hf_at(monkeypatch, server.url, tmp_path / "hf-home")
        yield server


# What `from hub_fixtures import *` in conftest.py brings in: the fixtures only.
__all__ = ["quant_ladder", "multipart", "mmproj_file", "hub"]
