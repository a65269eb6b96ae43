"""A small reader for the 32-bit little-endian ELF files the Arm toolchain links: loadable
segments (what a loader or a UF2 must place where), section headers (for the fit check) and
symbols with their sizes (e.g. the model's ``arena``). Reading the file directly keeps the
numbers exact and independent of any tool's text output."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import SerenityError

__all__ = ["Segment", "Section", "Symbol", "ElfImage", "read_elf"]

_PT_LOAD = 1
_SHT_SYMTAB = 2
_SHT_NOBITS = 8
_SHF_ALLOC = 0x2


@dataclass(frozen=True)
class Segment:
    address: int      # load (physical) address
    data: bytes


@dataclass(frozen=True)
class Section:
    name: str
    address: int
    size: int
    alloc: bool       # occupies target memory
    nobits: bool      # zero-initialised, nothing stored in the image (.bss)


@dataclass(frozen=True)
class Symbol:
    name: str
    address: int
    size: int


@dataclass(frozen=True)
class ElfImage:
    path: Path
    segments: list[Segment]
    sections: list[Section]
    symbols: dict[str, Symbol]

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)


def _cstr(table: bytes, offset: int) -> str:
    return table[offset:table.index(b"\0", offset)].decode("ascii", "replace")


def read_elf(path: str | Path) -> ElfImage:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise SerenityError(f"cannot read ELF file '{path}': {e.strerror}") from None
    if raw[:4] != b"\x7fELF" or raw[4] != 1 or raw[5] != 1:
        raise SerenityError(f"'{path}' is not a 32-bit little-endian ELF file")
    (phoff, shoff) = struct.unpack_from("<II", raw, 28)
    (phentsize, phnum, shentsize, shnum, shstrndx) = struct.unpack_from("<HHHHH", raw, 42)

    segments = []
    for i in range(phnum):
        p_type, p_offset, _vaddr, p_paddr, p_filesz = struct.unpack_from(
            "<IIIII", raw, phoff + i * phentsize)
        if p_type == _PT_LOAD and p_filesz:
            segments.append(Segment(p_paddr, raw[p_offset:p_offset + p_filesz]))
    segments.sort(key=lambda s: s.address)

    headers = [struct.unpack_from("<IIIIIIIIII", raw, shoff + i * shentsize)
               for i in range(shnum)]
    shstr = headers[shstrndx]
    names = raw[shstr[4]:shstr[4] + shstr[5]]
    sections, symbols = [], {}
    for name, sh_type, flags, addr, offset, size, link, _info, _align, entsize in headers:
        sections.append(Section(_cstr(names, name), addr, size, bool(flags & _SHF_ALLOC),
                                sh_type == _SHT_NOBITS))
        if sh_type == _SHT_SYMTAB:
            strtab = headers[link]
            strings = raw[strtab[4]:strtab[4] + strtab[5]]
            for off in range(offset, offset + size, entsize):
                st_name, st_value, st_size = struct.unpack_from("<III", raw, off)
                if st_name:
                    sym = Symbol(_cstr(strings, st_name), st_value, st_size)
                    symbols.setdefault(sym.name, sym)
    return ElfImage(path, segments, sections, symbols)
