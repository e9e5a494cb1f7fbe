"""x86-64 CPUID and XGETBV from Python, and their decoding into llama.cpp-relevant features.

Windows has no /proc/cpuinfo and IsProcessorFeaturePresent knows nothing of FMA, F16C,
AVX512-BW/VNNI/BF16, AVX-VNNI or AMX, so we execute the instructions ourselves: a few bytes
of machine code in an executable page, called through ctypes. The code takes no arguments (the
buffer address is patched in as an immediate) and touches only rax, rbx (saved), rcx, rdx and
r8, so the same bytes are valid under the System V and the Microsoft x64 calling conventions
and can be tested on Linux.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import struct
import sys
from dataclasses import dataclass

_X86_64 = {"x86_64", "amd64"}

# push rbx; mov r8, imm64; mov eax,[r8]; mov ecx,[r8+4]; cpuid;
# mov [r8],eax; mov [r8+4],ebx; mov [r8+8],ecx; mov [r8+12],edx; pop rbx; ret
_CPUID_HEAD = b"\x53\x49\xb8"
_CPUID_TAIL = (
    b"\x41\x8b\x00\x41\x8b\x48\x04\x0f\xa2"
    b"\x41\x89\x00\x41\x89\x58\x04\x41\x89\x48\x08\x41\x89\x50\x0c\x5b\xc3"
)
# mov r8, imm64; mov ecx,[r8]; xgetbv; mov [r8],eax; mov [r8+4],edx; ret
_XGETBV_HEAD = b"\x49\xb8"
_XGETBV_TAIL = b"\x41\x8b\x08\x0f\x01\xd0\x41\x89\x00\x41\x89\x50\x04\xc3"

_CODE_OFFSET = 64  # the 16-byte data buffer lives at the start of the page, code after it


@dataclass(frozen=True)
class CpuidLeaves:
    """Raw registers (eax, ebx, ecx, edx) of the leaves that carry the features we decode."""

    leaf1: tuple[int, int, int, int]
    leaf7_0: tuple[int, int, int, int]
    leaf7_1: tuple[int, int, int, int]
    xcr0: int  # 0 when the OS has not enabled XSAVE (then no AVX state is saved)
    brand: str


def is_x86_64() -> bool:
    return platform.machine().lower() in _X86_64


def read_cpuid() -> CpuidLeaves:
    """Execute CPUID/XGETBV on this CPU. Raises OSError where executable memory is refused."""
    if not is_x86_64():
        raise OSError(f"cpuid needs an x86-64 CPU, this is {platform.machine()}")
    with _ExecutablePage() as page:
        max_leaf = page.cpuid(0, 0)[0]
        leaf1 = page.cpuid(1, 0)
        leaf7_0 = page.cpuid(7, 0) if max_leaf >= 7 else (0, 0, 0, 0)
        leaf7_1 = page.cpuid(7, 1) if max_leaf >= 7 and leaf7_0[0] >= 1 else (0, 0, 0, 0)
        osxsave = bool(leaf1[2] & (1 << 27))
        # XGETBV faults (#UD) unless the OS set CR4.OSXSAVE, which leaf 1 reports.
        xcr0 = page.xgetbv(0) if osxsave else 0
        brand = ""
        if page.cpuid(0x80000000, 0)[0] >= 0x80000004:
            raw = b"".join(
                struct.pack("<4I", *page.cpuid(leaf, 0))
                for leaf in (0x80000002, 0x80000003, 0x80000004)
            )
            brand = raw.split(b"\0", 1)[0].decode("ascii", "replace").strip()
    return CpuidLeaves(leaf1, leaf7_0, leaf7_1, xcr0, brand)


def features_from_cpuid(leaves: CpuidLeaves) -> tuple[str, ...]:
    """Decode features the CPU has *and* the OS saves the registers of (Intel SDM vol. 2A)."""
    ecx1 = leaves.leaf1[2]
    _, ebx7, ecx7, edx7 = leaves.leaf7_0
    eax71 = leaves.leaf7_1[0]
    xcr0 = leaves.xcr0
    avx_os = xcr0 & 0b110 == 0b110  # XMM and YMM state
    avx512_os = avx_os and xcr0 & 0b11100000 == 0b11100000  # opmask, ZMM_Hi256, Hi16_ZMM
    amx_os = xcr0 & (0b11 << 17) == 0b11 << 17  # XTILECFG, XTILEDATA

    def bit(reg: int, n: int) -> bool:
        return bool(reg >> n & 1)

    found = {
        "SSE3": bit(ecx1, 0),
        "SSSE3": bit(ecx1, 9),
        "SSE4_2": bit(ecx1, 20),
        "AVX": avx_os and bit(ecx1, 28),
        "FMA": avx_os and bit(ecx1, 12),
        "F16C": avx_os and bit(ecx1, 29),
        "AVX2": avx_os and bit(ebx7, 5),
        "AVX_VNNI": avx_os and bit(eax71, 4),
        "AVX512F": avx512_os and bit(ebx7, 16),
        "AVX512BW": avx512_os and bit(ebx7, 30),
        "AVX512VBMI": avx512_os and bit(ecx7, 1),
        "AVX512VNNI": avx512_os and bit(ecx7, 11),
        "AVX512BF16": avx512_os and bit(eax71, 5),
        "AMX_BF16": amx_os and bit(edx7, 22),
        "AMX_TILE": amx_os and bit(edx7, 24),
        "AMX_INT8": amx_os and bit(edx7, 25),
    }
    return tuple(name for name, present in found.items() if present)


class _ExecutablePage:
    """One page that is writable and executable, freed on exit."""

    def __enter__(self) -> _ExecutablePage:
        size = mmap.PAGESIZE
        if sys.platform == "win32":
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
            kernel32.VirtualAlloc.restype = ctypes.c_void_p
            kernel32.VirtualAlloc.argtypes = [
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_uint32,
                ctypes.c_uint32,
            ]
            kernel32.VirtualFree.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32]
            mem_commit_reserve, page_execute_readwrite = 0x3000, 0x40
            addr = kernel32.VirtualAlloc(None, size, mem_commit_reserve, page_execute_readwrite)
            if not addr:
                raise ctypes.WinError(ctypes.get_last_error())
            self._free = lambda: kernel32.VirtualFree(addr, 0, 0x8000)  # MEM_RELEASE
            self._addr = addr
        else:
            prot = mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
            self._map = mmap.mmap(-1, size, prot=prot)  # OSError where W^X is enforced
            self._addr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
            self._free = self._map.close
        self._buffer = (ctypes.c_uint32 * 4).from_address(self._addr)
        return self

    def __exit__(self, *exc: object) -> None:
        # from_buffer pins the mmap; drop our views before closing it.
        del self._buffer
        self._free()

    def _run(self, head: bytes, tail: bytes) -> None:
        code = head + struct.pack("<Q", self._addr) + tail
        ctypes.memmove(self._addr + _CODE_OFFSET, code, len(code))
        ctypes.CFUNCTYPE(None)(self._addr + _CODE_OFFSET)()

    def cpuid(self, leaf: int, subleaf: int) -> tuple[int, int, int, int]:
        self._buffer[0], self._buffer[1] = leaf, subleaf
        self._run(_CPUID_HEAD, _CPUID_TAIL)
        return (self._buffer[0], self._buffer[1], self._buffer[2], self._buffer[3])

    def xgetbv(self, register: int) -> int:
        self._buffer[0] = register
        self._run(_XGETBV_HEAD, _XGETBV_TAIL)
        return self._buffer[0] | self._buffer[1] << 32
