"""Memory a model needs under llama.cpp, per device, from its header alone.

Weights and the KV cache follow llama.cpp's allocation rules exactly (see model_shape). The
compute buffer is the peak of llama.cpp's worst-case graph (a full micro-batch whose every
token asks for logits), fitted to what the shipped build reports on the CPU: the logits
(n_ubatch x n_vocab floats) dominate small models; the attention scores (n_kv x n_ubatch x
n_head floats, without flash attention) dominate long contexts. The engine process itself
(interpreter, libraries, vocabulary tables) is a measured fixed part. All sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deskllm.planner.model_shape import ModelShape

MIB = 1 << 20
CTX_PAD = 256  # llama.cpp pads n_ctx and the SWA cache to 256 cells
KV_TYPES: dict[str, tuple[int, int]] = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}
DEFAULT_UBATCH = 512  # the engine's n_batch = n_ubatch
# The engine worker's own RSS with the model's vocabulary loaded, measured with the CPU build
# on Linux (SmolLM2 49k tokens: 70 MiB; Gemma 3 262k tokens: 99 MiB). GPU runtimes add more;
# calibration learns the difference per machine.
ENGINE_BASE_BYTES = 63 * MIB
ENGINE_BYTES_PER_VOCAB_TOKEN = 141
FLOAT = 4
# ggml type ids the CPU backend repacks for its matrix kernels (ggml-cpu/repack.cpp,
# ggml_repack_get_optimal_repack_type): Q4_0, Q4_K, IQ4_NL, MXFP4 with AVX2, Q2_K too with
# AVX-512; on ARM with dot-product instructions also Q5_K, Q6_K and Q8_0.
_REPACK_AVX2 = frozenset({2, 12, 20, 39})
_REPACK_AVX512 = _REPACK_AVX2 | {10}
_REPACK_ARM = frozenset({2, 8, 12, 13, 14, 20, 39})


def cpu_repack_types(features: tuple[str, ...] | list[str]) -> frozenset[int]:
    """The weight types llama.cpp copies into a repacked layout on a CPU with `features`
    (deskllm.hardware CpuInfo names), when its extra buffer types are on (the default)."""
    present = set(features)
    if "NEON" in present and "DOTPROD" in present:
        return _REPACK_ARM
    if "AVX512F" in present:
        return _REPACK_AVX512
    if "AVX2" in present:
        return _REPACK_AVX2
    return frozenset()


@dataclass(frozen=True)
class EstimateParams:
    """How the model would be loaded.

    Attributes:
        n_gpu_layers: llama.cpp's count of layer slots on the GPU: the output layer takes the
            first one, then the last blocks; block_count + 1 (or -1) is everything.
        flash_attn: None: on exactly when the KV cache is quantized (the engine requires it).
        swa_full: full-size cache for sliding-window layers, llama.cpp's default, which the
            engine keeps so a conversation's prefix can be reused.
        gpu_available: the engine build has a GPU device; without one every layer stays on
            the CPU whatever n_gpu_layers says.
        repack_types: weight types the CPU backend repacks (see cpu_repack_types); empty when
            llama.cpp's extra buffer types are off (use_extra_bufts False).
    """

    n_ctx: int
    kv_type: str = "f16"
    n_gpu_layers: int = 0
    n_ubatch: int = DEFAULT_UBATCH
    flash_attn: bool | None = None
    swa_full: bool = True
    gpu_available: bool = False
    repack_types: frozenset[int] = frozenset()

    @property
    def uses_flash_attn(self) -> bool:
        return self.kv_type != "f16" if self.flash_attn is None else self.flash_attn


@dataclass(frozen=True)
class Corrections:
    """Learned from earlier loads on this machine (see calibration): a factor on the compute
    buffers (per architecture) and an offset on the engine's fixed RAM (per machine)."""

    compute_factor: float = 1.0
    overhead_bytes: int = 0
    samples: int = 0


@dataclass(frozen=True)
class MemoryPart:
    """One item of the estimate. name: weights | kv | compute | output | engine."""

    name: str
    device: str  # "cpu" | "gpu"
    bytes: int


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp puts the layers for a given n_gpu_layers."""

    n_gpu_layers: int  # effective slots on the GPU, 0..block_count + 1
    first_gpu_block: int  # blocks from here on are on the GPU
    output_on_gpu: bool

    def block_on_gpu(self, il: int) -> bool:
        return il >= self.first_gpu_block

    def blocks_on_gpu(self, block_count: int) -> int:
        return block_count - self.first_gpu_block


@dataclass(frozen=True)
class MemoryEstimate:
    """RAM and VRAM a load needs at its peak, and what they are made of.

    Attributes:
        ram_bytes: system memory: weights and KV cache on the CPU, CPU compute buffer, output
            buffer, the engine process itself.
        vram_bytes: GPU memory: offloaded weights, their KV cache, the GPU compute buffer.
        rss_at_load_bytes: the engine's resident memory right after loading (the compute
            buffer is reserved but not yet touched then).
        repacked_bytes: CPU weights llama.cpp copies into its repacked layout ("CPU_REPACK").
            Not part of ram_bytes: the mapped file pages they were copied from are never read
            again, clean page cache the OS takes back when memory runs short; RSS counts both.
        mapped_bytes: the range of the file llama.cpp keeps mapped ("CPU_Mapped"): the CPU
            weights and any offloaded tensors lying between them (again clean page cache,
            counted in RSS but not in ram_bytes).
        kv_cells / swa_cells: KV cache sizes in tokens (full-attention and sliding layers).
    """

    ram_bytes: int
    vram_bytes: int
    parts: tuple[MemoryPart, ...]
    placement: Placement
    n_ctx: int
    kv_cells: int
    swa_cells: int
    rss_at_load_bytes: int
    repacked_bytes: int = 0
    mapped_bytes: int = 0
    corrections: Corrections = field(default_factory=Corrections)

    def part(self, name: str, device: str | None = None) -> int:
        return sum(p.bytes for p in self.parts if p.name == name and device in (None, p.device))

    def buffer(self, kind: str, device: str | None = None) -> int:
        """The estimate of what llama.cpp reports as "<device> <kind> buffer size", summed:
        kind "model" (mapped and repacked weights), "kv" or "compute"."""
        if kind != "model":
            return self.part(kind, device)
        host = self.mapped_bytes + self.repacked_bytes
        gpu = self.part("weights", "gpu")
        return {None: host + gpu, "cpu": host, "gpu": gpu}[device]


def part_sum(parts: list[MemoryPart], name: str, device: str = "cpu") -> int:
    return sum(p.bytes for p in parts if p.name == name and p.device == device)


def pad(n: int, to: int = CTX_PAD) -> int:
    return -(-n // to) * to


def row_bytes(kv_type: str, n: int) -> int:
    block, size = KV_TYPES[kv_type]
    return -(-n // block) * size


def placement_for(shape: ModelShape, n_gpu_layers: int, gpu_available: bool) -> Placement:
    """llama.cpp's rule (llama_model::load_tensors): with N slots the GPU gets the output layer
    first, then the last N-1 blocks; block_count + 1 slots is a full offload."""
    slots = shape.block_count + 1
    n = 0 if not gpu_available else slots if n_gpu_layers < 0 else min(n_gpu_layers, slots)
    first = max(0, slots - n)
    return Placement(
        n_gpu_layers=n, first_gpu_block=min(first, shape.block_count), output_on_gpu=n >= 1
    )


def kv_layer_cells(shape: ModelShape, params: EstimateParams) -> tuple[int, int]:
    """(full-attention cells, sliding-window cells) as llama.cpp sizes them."""
    cells = pad(max(params.n_ctx, 1))
    if params.swa_full or not shape.sliding_window:
        return cells, cells
    ubatch = min(params.n_ubatch, params.n_ctx)
    return cells, pad(min(cells, shape.sliding_window + ubatch))


def kv_bytes_per_layer(shape: ModelShape, params: EstimateParams) -> tuple[int, ...]:
    cells, swa_cells = kv_layer_cells(shape, params)
    out = []
    for il in range(shape.block_count):
        heads = shape.head_count_kv[il]
        n = swa_cells if shape.swa_layers[il] else cells
        k = row_bytes(params.kv_type, shape.key_length[il] * heads)
        v = row_bytes(params.kv_type, shape.value_length[il] * heads)
        out.append(n * (k + v))
    return tuple(out)


def compute_peaks(shape: ModelShape, params: EstimateParams) -> tuple[int, int]:
    """(logits peak, per-layer peak) of the worst-case graph, in bytes."""
    ubatch = min(params.n_ubatch, params.n_ctx)
    cells, swa_cells = kv_layer_cells(shape, params)
    hidden = ubatch * shape.n_embd * FLOAT
    logits = ubatch * shape.n_vocab * FLOAT + 3 * hidden
    attn = 0
    for il in range(shape.block_count):
        n_kv = swa_cells if shape.swa_layers[il] else cells
        if params.uses_flash_attn:
            scores = n_kv * ubatch * 2  # only the f16 mask: scores are computed in tiles
        else:
            scores = n_kv * ubatch * FLOAT * (shape.head_count[il] + 1)  # KQ and the f32 mask
        attn = max(attn, scores)
    ffn = ubatch * shape.feed_forward_length * FLOAT * 2 + 3 * hidden
    return logits, max(attn + 6 * hidden, ffn)


def estimate_memory(
    shape: ModelShape, params: EstimateParams, corrections: Corrections | None = None
) -> MemoryEstimate:
    """RAM and VRAM for loading `shape` with `params`."""
    corr = corrections or Corrections()
    place = placement_for(shape, params.n_gpu_layers, params.gpu_available)
    n = shape.block_count
    first = place.first_gpu_block
    parts: list[MemoryPart] = []

    def add(name: str, device: str, value: float) -> None:
        if value > 0:
            parts.append(MemoryPart(name, device, int(value)))

    output = shape.output_bytes
    if place.output_on_gpu and shape.tied_embeddings:
        output += shape.token_embd_bytes  # the tied embeddings are copied to the GPU
    add(
        "weights",
        "cpu",
        shape.input_bytes + sum(shape.layer_bytes[:first]) + (0 if place.output_on_gpu else output),
    )
    add("weights", "gpu", sum(shape.layer_bytes[first:]) + (output if place.output_on_gpu else 0))

    def on_cpu(slot: int) -> bool:
        return slot < 0 or (slot < n and slot < first) or (slot >= n and not place.output_on_gpu)

    mapped = shape.mapped_bytes(on_cpu) if shape.tensor_spans else part_sum(parts, "weights")
    cpu_matrices = [*shape.layer_matrix_bytes[:first]]
    if not place.output_on_gpu:
        cpu_matrices.append(shape.output_matrix_bytes)
    repacked = sum(b for layer in cpu_matrices for t, b in layer if t in params.repack_types)

    kv = kv_bytes_per_layer(shape, params)
    add("kv", "cpu", sum(kv[:first]))
    add("kv", "gpu", sum(kv[first:]))

    logits, layer_peak = compute_peaks(shape, params)
    full = max(logits, layer_peak) * corr.compute_factor
    if place.n_gpu_layers == 0:
        add("compute", "cpu", full)
    else:
        # With any layer offloaded the whole worst-case graph runs on the GPU: llama.cpp sends
        # big-batch ops on CPU-held weights there too (op_offload, on by default). The host
        # keeps the inputs it copies over: the attention mask and the embedded tokens.
        add("compute", "gpu", full)
        ubatch = min(params.n_ubatch, params.n_ctx)
        mask = pad(max(params.n_ctx, 1)) * ubatch * (2 if params.uses_flash_attn else FLOAT)
        add("compute", "cpu", mask + 2 * ubatch * shape.n_embd * FLOAT)
    add("output", "cpu", shape.n_vocab * FLOAT)  # logits of one token, in host memory
    engine = ENGINE_BASE_BYTES + ENGINE_BYTES_PER_VOCAB_TOKEN * shape.n_vocab
    add("engine", "cpu", max(0, engine + corr.overhead_bytes))

    ram = sum(p.bytes for p in parts if p.device == "cpu")
    cpu_compute = sum(p.bytes for p in parts if p.name == "compute" and p.device == "cpu")
    cells, swa_cells = kv_layer_cells(shape, params)
    return MemoryEstimate(
        ram_bytes=ram,
        vram_bytes=sum(p.bytes for p in parts if p.device == "gpu"),
        parts=tuple(parts),
        placement=place,
        n_ctx=params.n_ctx,
        kv_cells=cells,
        swa_cells=swa_cells if any(shape.swa_layers) else 0,
        rss_at_load_bytes=ram - cpu_compute + repacked + mapped - part_sum(parts, "weights"),
        repacked_bytes=repacked,
        mapped_bytes=mapped,
        corrections=corr,
    )


def bytes_read_per_token(
    shape: ModelShape, params: EstimateParams, context_tokens: int
) -> tuple[int, int]:
    """(CPU bytes, GPU bytes) one decoded token reads: the weights of every layer (only the
    experts in use of a MoE layer), the output head, and the KV cache of `context_tokens`."""
    place = placement_for(shape, params.n_gpu_layers, params.gpu_available)
    moe_share = shape.expert_used_count / shape.expert_count if shape.expert_count else 1.0
    cpu = gpu = 0.0
    cells, swa_cells = kv_layer_cells(shape, params)
    for il in range(shape.block_count):
        dense = shape.layer_bytes[il] - shape.layer_expert_bytes[il]
        weights = dense + shape.layer_expert_bytes[il] * moe_share
        heads = shape.head_count_kv[il]
        tokens = min(context_tokens, swa_cells if shape.swa_layers[il] else cells)
        if shape.swa_layers[il] and shape.sliding_window:
            tokens = min(tokens, shape.sliding_window)
        kv = tokens * (
            row_bytes(params.kv_type, shape.key_length[il] * heads)
            + row_bytes(params.kv_type, shape.value_length[il] * heads)
        )
        if place.block_on_gpu(il):
            gpu += weights + kv
        else:
            cpu += weights + kv
    head = shape.output_bytes + (shape.token_embd_bytes if shape.tied_embeddings else 0)
    if place.output_on_gpu:
        gpu += head
    else:
        cpu += head
    cpu += shape.n_embd * 4  # one row of the token embeddings
    return int(cpu), int(gpu)
