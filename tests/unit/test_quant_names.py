"""File names as uploaders write them -> quant label, shard, group, kind."""

from __future__ import annotations

import pytest

from deskllm.catalog.hub import group_model_files
from deskllm.catalog.quant_names import (
    Shard,
    check_file_type,
    file_kind,
    group_key,
    parse_gguf_name,
    quant_label,
    shard_of,
)


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("SmolLM2-135M-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("smollm2-135m-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("Llama-3.2-1B-Instruct.Q8_0.gguf", "Q8_0"),
        ("Meta-Llama-3.1-8B-Instruct-IQ3_XXS.gguf", "IQ3_XXS"),
        ("Model-IQ3_XS.gguf", "IQ3_XS"),
        ("Model-IQ4_NL.gguf", "IQ4_NL"),
        ("Model-IQ1_S.gguf", "IQ1_S"),
        ("Model-IQ2_M.gguf", "IQ2_M"),
        ("DeepSeek-R1-0528-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
        ("Qwen3-30B-A3B-UD-IQ1_M.gguf", "UD-IQ1_M"),
        ("Qwen3-8B-UD-Q8_K_XL.gguf", "UD-Q8_K_XL"),
        ("Qwen2.5-7B-Instruct-Q6_K_L.gguf", "Q6_K_L"),
        ("Model-Q3_K_S.gguf", "Q3_K_S"),
        ("Model-Q2_K.gguf", "Q2_K"),
        ("Model-q2_k_s.gguf", "Q2_K_S"),
        ("Model-Q5_1.gguf", "Q5_1"),
        ("Model-Q4_0_4_8.gguf", "Q4_0_4_8"),
        ("model-bf16.gguf", "BF16"),
        ("model-BF16.gguf", "BF16"),
        ("model-f16.gguf", "F16"),
        ("model-fp16.gguf", "F16"),
        ("model-F32.gguf", "F32"),
        ("gpt-oss-20b-MXFP4.gguf", "MXFP4"),
        ("gpt-oss-120b-mxfp4-00001-of-00003.gguf", "MXFP4"),
        ("bitnet-b1.58-2B-4T-TQ1_0.gguf", "TQ1_0"),
        ("BitNet-tq2_0.gguf", "TQ2_0"),
        ("Mistral-7B-Instruct-v0.3.i1-Q4_K_M.gguf", "Q4_K_M"),  # mradermacher's imatrix quants
        ("model-q4-k-m.gguf", "Q4_K_M"),  # hyphens inside the label
        ("Model-Q4_K_M-00002-of-00003.gguf", "Q4_K_M"),
        ("Model-F16-Q4_K_M.gguf", "Q4_K_M"),  # the quant comes last
        ("model_q5_k_m.gguf", "Q5_K_M"),
        ("MODEL.Q4_K_S.GGUF", "Q4_K_S"),
        # no recognisable label: None, not a guess
        ("Qwen2-7B.gguf", None),
        ("weird-name.gguf", None),
        ("Q8.gguf", None),
        ("model-q4.gguf", None),
        ("ELF16-model.gguf", None),  # F16 inside a word
        ("Q4_K_Mx.gguf", None),
        ("", None),
    ],
)
def test_quant_label(name, label):
    assert quant_label(name) == label


def test_label_from_folder_when_the_file_has_none():
    name = parse_gguf_name("Q4_K_M/Model-00001-of-00002.gguf")
    assert name.quant == "Q4_K_M" and name.shard == Shard(1, 2)
    assert parse_gguf_name("UD-Q2_K_XL/X-UD-Q2_K_XL-00003-of-00005.gguf").quant == "UD-Q2_K_XL"


@pytest.mark.parametrize(
    ("name", "shard"),
    [
        ("Model-Q4_K_M-00001-of-00003.gguf", Shard(1, 3)),
        ("dir/Model-Q4_K_M-00003-of-00003.GGUF", Shard(3, 3)),
        ("Model-Q4_K_M.gguf", None),
        ("Model-Q4_K_M-00004-of-00003.gguf", None),  # impossible: not a shard
        ("Model-Q4_K_M-00000-of-00003.gguf", None),
        ("Model-Q4_K_M-0001-of-0003.gguf", None),  # llama.cpp writes five digits
        ("Model-Q4_K_M.gguf.part1of2", None),
    ],
)
def test_shards(name, shard):
    assert shard_of(name) == shard


def test_group_key():
    assert group_key("Q4_1/M-Q4_1-00002-of-00002.gguf") == "Q4_1/M-Q4_1.gguf"
    assert group_key("M-Q4_1.gguf") == "M-Q4_1.gguf"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("mmproj-model-f16.gguf", "mmproj"),
        ("Qwen2.5-VL-7B-Instruct-mmproj-F16.gguf", "mmproj"),
        ("MMPROJ-F32.gguf", "mmproj"),
        ("imatrix.gguf", "imatrix"),
        ("Model-Q4_K_M.gguf", "model"),
    ],
)
def test_kind(name, kind):
    assert file_kind(name) == kind


@pytest.mark.parametrize(
    ("label", "file_type", "status"),
    [
        ("Q4_K_M", 15, "match"),
        ("Q8_0", 7, "match"),
        ("BF16", 32, "match"),
        ("UD-Q4_K_XL", 15, "close"),  # Unsloth's mix keeps the base type's file_type
        ("Q6_K_L", 18, "close"),
        ("Q4_K_S", 15, "close"),
        ("Q4_K_M", 7, "mismatch"),
        ("IQ4_XS", 25, "mismatch"),  # IQ4_NL in the header
        (None, 7, "unknown"),
        ("Q4_K_M", None, "unknown"),
        ("Q4_K_M", 999, "unknown"),
    ],
)
def test_check_file_type(label, file_type, status):
    check = check_file_type(label, file_type)
    assert check.status == status
    assert check.message


def test_group_model_files_joins_shards_and_keeps_mmproj_apart():
    files, mmproj = group_model_files(
        [
            ("README.md", 10, None),
            ("M-Q8_0.gguf", 800, "a" * 64),
            ("big/M-Q4_K_M-00002-of-00002.gguf", 300, "c" * 64),
            ("big/M-Q4_K_M-00001-of-00002.gguf", 400, "b" * 64),
            ("M-Q2_K-00001-of-00003.gguf", 100, "d" * 64),  # parts 2 and 3 missing
            ("mmproj-M-f16.gguf", 50, "e" * 64),
            ("imatrix.gguf", 5, "f" * 64),
        ]
    )
    assert [f.name for f in files] == ["M-Q8_0.gguf", "big/M-Q4_K_M.gguf", "M-Q2_K.gguf"]
    split = files[1]
    assert split.quant == "Q4_K_M" and split.size == 700 and split.complete
    assert [p.path for p in split.parts] == [
        "big/M-Q4_K_M-00001-of-00002.gguf",
        "big/M-Q4_K_M-00002-of-00002.gguf",
    ]
    assert split.sha256 == "b" * 64  # the first part's
    assert not files[2].complete and files[2].expected_parts == 3
    assert [m.name for m in mmproj] == ["mmproj-M-f16.gguf"]
