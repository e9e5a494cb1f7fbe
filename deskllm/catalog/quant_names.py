"""What a GGUF file name says: its quantization label, its shard position, whether it is an
mmproj (vision projector) or other side file rather than a model.

Uploaders spell labels every way (`Q4_K_M`, `q4_k_m`, `Model.i1-IQ3_XXS`, `UD-Q4_K_XL`,
`model-q4-k-m`), so parsing is case-insensitive and takes the last label in the name (the
quant comes last, after the model name, which may itself contain things like `F16`).
A name with no recognisable label gives None rather than a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from deskllm.catalog.quants import file_type_name

# Longest alternatives first inside each group: the regex takes the first that fits.
_LABEL = (
    r"IQ[1-4]_(?:XXS|XS|NL|S|M)"
    r"|Q[1-8]_K(?:_(?:XXL|XL|S|M|L))?"
    r"|Q4_0_[48]_[48]"  # old ARM repacked types
    r"|Q[1-8]_[01]"
    r"|TQ[12]_0"
    r"|MXFP4(?:_MOE)?"
    r"|NVFP4"
    r"|BF16|FP16|F16|FP32|F32"
)
# A label stands alone: not preceded or followed by a letter or digit (`_`, `-`, `.` and the
# ends of the name are boundaries), nor followed by a size suffix it could not take
# (`Q4_K_MX` is not `Q4_K`). `UD-` marks Unsloth's dynamic quants and is kept.
_LABEL_RE = re.compile(rf"(?<![A-Z0-9])(UD[-_])?({_LABEL})(?![A-Z0-9]|_[SMLX]{{1,3}}(?![A-Z0-9]))")
_SHARD_RE = re.compile(r"^(?P<base>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_ALIASES = {"FP16": "F16", "FP32": "F32"}


@dataclass(frozen=True)
class Shard:
    number: int  # 1-based, as in the name
    count: int


@dataclass(frozen=True)
class GgufName:
    path: str  # as given (a repo path or a file name)
    quant: str | None  # canonical label, e.g. "Q4_K_M", "UD-Q4_K_XL"; None if unrecognised
    shard: Shard | None  # set for `-00001-of-00003.gguf` names
    group: str  # the model file this belongs to: the path without the shard suffix
    kind: str  # "model" | "mmproj" | "imatrix"


def quant_label(name: str) -> str | None:
    """The canonical quantization label in a file name, or None."""
    stem = PurePosixPath(name).name
    shard = _SHARD_RE.match(stem)
    if shard:
        stem = shard["base"]
    elif stem.lower().endswith(".gguf"):
        stem = stem[:-5]
    label = _last_label(stem.upper())
    if label is None:
        # `model-q4-k-m`: hyphens inside the label. Tried second, so `UD-` stays a prefix.
        label = _last_label(stem.upper().replace("-", "_"))
    return label


def _last_label(upper: str) -> str | None:
    matches = list(_LABEL_RE.finditer(upper))
    if not matches:
        return None
    prefix, label = matches[-1].groups()
    label = _ALIASES.get(label, label)
    return f"UD-{label}" if prefix else label


def shard_of(name: str) -> Shard | None:
    match = _SHARD_RE.match(PurePosixPath(name).name)
    if not match:
        return None
    number, count = int(match["no"]), int(match["count"])
    if not 1 <= number <= count:
        return None
    return Shard(number, count)


def group_key(path: str) -> str:
    """`dir/Model-Q4_K_M-00002-of-00003.gguf` -> `dir/Model-Q4_K_M.gguf`; others unchanged."""
    p = PurePosixPath(path)
    match = _SHARD_RE.match(p.name)
    if not match:
        return path
    return str(p.with_name(match["base"] + ".gguf"))


def file_kind(path: str) -> str:
    name = PurePosixPath(path).name.lower()
    if "mmproj" in name:
        return "mmproj"  # vision projector: needed next to the model, never a quant choice
    if "imatrix" in name:
        return "imatrix"  # importance matrix used to make the quants (newer ones are GGUF)
    return "model"


def parse_gguf_name(path: str) -> GgufName:
    """Everything the name says. The label comes from the file name, else from its folder
    (`Q4_K_M/Model-00001-of-00002.gguf`)."""
    label = quant_label(path)
    parent = PurePosixPath(path).parent.name
    if label is None and parent:
        label = quant_label(parent)
    return GgufName(path, label, shard_of(path), group_key(path), file_kind(path))


# -- does the header agree with the name? -------------------------------------------------


@dataclass(frozen=True)
class FileTypeCheck:
    status: str  # "match" | "close" | "mismatch" | "unknown"
    name_label: str | None
    header_label: str | None  # from general.file_type
    message: str


def _family(label: str) -> str:
    """The base type a K-quant label builds on (Q4_K_M, Q4_K_L, UD-Q4_K_XL -> Q4_K); any other
    label is its own family."""
    label = label.removeprefix("UD-")
    if "_K" in label and not label.startswith("IQ"):
        return label[: label.index("_K") + 2]
    return label.removesuffix("_MOE")


def check_file_type(name_label: str | None, file_type: int | None) -> FileTypeCheck:
    """Compare a file name's label with the header's `general.file_type`.

    "close" means the same base type with a different mix (uploaders' Q4_K_L / Q6_K_L /
    UD-…_XL variants keep a standard file_type, and llama.cpp's ftype is only the main type).
    """
    header = file_type_name(file_type) if file_type is not None else None
    if header is not None and header.startswith("type "):
        header = None  # an id this app does not know
    if name_label is None or header is None:
        if name_label is None:
            missing = "the file name has no quantization label"
        else:
            missing = "the header has no known general.file_type"
        return FileTypeCheck("unknown", name_label, header, f"cannot check: {missing}")
    if name_label == header:
        return FileTypeCheck("match", name_label, header, f"{name_label}: header agrees")
    if _family(name_label) == _family(header):
        return FileTypeCheck(
            "close", name_label, header, f"named {name_label}; the header says {header}"
        )
    return FileTypeCheck(
        "mismatch",
        name_label,
        header,
        f"named {name_label} but the header says {header}: the name is wrong, so size and "
        "quality figures based on it would be too",
    )
