"""A sequence state of a many-slot context, kept as a one-slot context writes it, and back
(llama.cpp's layout, without a model; the integration tests restore real states both
ways)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from deskllm.engine.kv_cache import many_streams, one_stream

HEAD = b"GGSQ" + struct.pack("<i", 0)  # magic and the sequence id, kept as they are


def state(n_stream: int, stream: int, cells: bytes, count: int = 3) -> bytearray:
    counts = [struct.pack("<I", 0)] * n_stream
    counts[stream] = struct.pack("<I", count) + cells
    return bytearray(HEAD + struct.pack("<I", n_stream) + b"".join(counts))


@given(st.integers(1, 8), st.data(), st.binary(min_size=4, max_size=64))
def test_a_slots_state_becomes_a_one_stream_state_and_back(n_stream, data, cells):
    stream = data.draw(st.integers(0, n_stream - 1))
    single = one_stream(state(n_stream, stream, cells), n_stream, stream)
    assert single == state(1, 0, cells)
    # Back for a context of any stream count: the cells first, the other streams empty.
    back = many_streams(bytes(single), n_stream)
    assert back == state(n_stream, 0, cells)


def test_data_laid_out_otherwise_is_not_converted():
    cells = b"\x01\x02\x03\x04"
    assert one_stream(state(4, 1, cells), 3, 1) is None  # another stream count
    assert one_stream(state(4, 1, cells), 4, 2) is None  # cells in another stream
    assert one_stream(state(4, 1, cells, count=0), 4, 1) is None  # no cells
    assert one_stream(bytearray(HEAD), 4, 1) is None  # truncated
    assert many_streams(bytes(state(2, 0, cells)), 4) is None  # not a one-stream state
    assert many_streams(HEAD, 4) is None
