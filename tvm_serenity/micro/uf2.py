"""UF2, the drag-and-drop format of the RP2040/RP2350 bootroms (BOOTSEL mass-storage drive).

Each 512-byte block: magic 0x0A324655, 0x9E5D5157; flags (0x2000: the family ID field is
present); target address; payload size (256, as the Raspberry Pi bootroms require); block
number; block count; family ID (RP2040 0xE48BFF56, RP2350 Arm secure 0xE48BFF59); 476 data
bytes of which the first 256 are the payload; end magic 0x0AB16F30. Payloads are
256-byte aligned pages; bytes of a page the image does not cover are zero.

For the Pico the bare-metal UF2 is RAM-only (every block targets SRAM), which the RP2040
bootrom loads and then enters at the lowest address; for the Pico 2 it targets flash, where
the RP2350 bootrom finds the image's IMAGE_DEF block.

``python -m tvm_serenity.micro uf2 firmware.elf firmware.uf2 --family 0xe48bff56`` converts
an ELF (the generated project's Makefile does).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import SerenityError
from .elf import Segment, read_elf

__all__ = ["Uf2Block", "encode_uf2", "decode_uf2", "elf_to_uf2", "MAGIC_START0",
           "MAGIC_START1", "MAGIC_END", "FLAG_FAMILY_ID_PRESENT", "BLOCK_SIZE", "PAYLOAD_SIZE"]

MAGIC_START0 = 0x0A324655
MAGIC_START1 = 0x9E5D5157
MAGIC_END = 0x0AB16F30
FLAG_FAMILY_ID_PRESENT = 0x00002000
BLOCK_SIZE = 512
PAYLOAD_SIZE = 256
_DATA_FIELD = 476
_HEADER = struct.Struct("<8I")


@dataclass(frozen=True)
class Uf2Block:
    target_address: int
    block_no: int
    num_blocks: int
    family_id: int
    flags: int
    payload: bytes


def _pages(segments: list[Segment]) -> dict[int, bytearray]:
    pages: dict[int, bytearray] = {}
    for seg in segments:
        pos = 0
        while pos < len(seg.data):
            addr = seg.address + pos
            offset = addr % PAYLOAD_SIZE
            n = min(PAYLOAD_SIZE - offset, len(seg.data) - pos)
            page = pages.setdefault(addr - offset, bytearray(PAYLOAD_SIZE))
            page[offset:offset + n] = seg.data[pos:pos + n]
            pos += n
    return pages


def encode_uf2(segments: list[Segment], family_id: int) -> bytes:
    """UF2 file for ``segments`` (address, bytes), one block per 256-byte page touched."""
    pages = _pages([s for s in segments if s.data])
    if not pages:
        raise SerenityError("cannot write a UF2 for an empty image")
    out = bytearray()
    for n, addr in enumerate(sorted(pages)):
        header = _HEADER.pack(MAGIC_START0, MAGIC_START1, FLAG_FAMILY_ID_PRESENT, addr,
                              PAYLOAD_SIZE, n, len(pages), family_id)
        data = bytes(pages[addr]).ljust(_DATA_FIELD, b"\0")
        out += header + data + struct.pack("<I", MAGIC_END)
    return bytes(out)


def decode_uf2(data: bytes) -> list[Uf2Block]:
    """Parse and validate a UF2 file (magic numbers, sizes, block numbering)."""
    if not data or len(data) % BLOCK_SIZE:
        raise SerenityError(f"UF2 size {len(data)} is not a positive multiple of {BLOCK_SIZE}")
    blocks = []
    for off in range(0, len(data), BLOCK_SIZE):
        (m0, m1, flags, addr, size, block_no, num_blocks,
         family) = _HEADER.unpack_from(data, off)
        (end,) = struct.unpack_from("<I", data, off + BLOCK_SIZE - 4)
        where = f"UF2 block at byte {off}"
        if (m0, m1, end) != (MAGIC_START0, MAGIC_START1, MAGIC_END):
            raise SerenityError(f"{where}: bad magic numbers")
        if not 0 < size <= _DATA_FIELD:
            raise SerenityError(f"{where}: payload size {size} out of range")
        if block_no != off // BLOCK_SIZE or num_blocks != len(data) // BLOCK_SIZE:
            raise SerenityError(f"{where}: numbered {block_no}/{num_blocks}")
        blocks.append(Uf2Block(addr, block_no, num_blocks, family, flags,
                               data[off + 32:off + 32 + size]))
    return blocks


def elf_to_uf2(elf: str | Path, uf2: str | Path, family_id: int) -> Path:
    """Write the loadable segments of ``elf`` as a UF2 file and return its path."""
    uf2 = Path(uf2)
    uf2.write_bytes(encode_uf2(read_elf(elf).segments, family_id))
    return uf2
