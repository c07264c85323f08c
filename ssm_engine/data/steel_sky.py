"""Beneath a Steel Sky's spoken lines and their words, read from the game's own files.

    game = SteelSky.open(".../usr/share/scummvm/beneath-a-steel-sky", tree_from=".../scummvm")
    for number, words in game.lines():           # every line that has a speech file
        samples, rate = game.speech(number)      # unsigned 8-bit at 11,025 Hz, as float32

Revolution Software's game (1994, freeware since 2003; Debian main ``beneath-a-steel-sky``, the CD
version 0.0372 with full speech) keeps everything in one archive, ``sky.dsk``, indexed by
``sky.dnr`` (the "dinner table": a file number, a 24-bit offset and 24 bits of size and flags
a file). Formats as ScummVM's sky engine reads them:

- a file may be packed with Rob Northen's RNC method 1 (LZ77 with three Huffman tables a block,
  a bit stream of little-endian 16-bit words read from the least significant bit, literal bytes
  stored whole in the stream after the word being read; ``rnc_unpack``). A packed file keeps
  the engine's 22-byte header in front, unpacked;
- a spoken line's text number ``n`` (4 bits of section, 12 of line) has its speech in file
  ``50000 + SPEECH_BASE[section] + line``: unsigned 8-bit mono at 11,025 Hz after the header;
- its words are in section file ``60600 + section`` (English), each line Huffman-coded from a
  2-bit boundary, found through a table of 32-line block lengths and a byte a line of lengths
  (``text``). The Huffman tree is not in the game's data but in the engine: it is read from
  ScummVM's executable (Debian's ``scummvm`` package), where it is a table of 3-byte nodes
  (left child, right child, character) that ``find_text_trees`` finds and ``SteelSky.open``
  checks against the lines' text (every spoken line must come out printable, its code as long
  as the length stored for it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .audio import unsigned_8bit
from .errors import DataError

__all__ = ["SteelSky", "rnc_unpack", "find_text_trees", "decode_text", "SPEECH_BASE", "RATE_HZ"]

RATE_HZ = 11025
HEADER = 22                          # the engine's DataFileHeader: eleven 16-bit fields
SPEECH_FILE = 50000
TEXT_FILE = 60600                    # + section; English is the first language
# a section's first speech file, after 50000 (the engine's table; the last is the end)
SPEECH_BASE = (0, 600, 1100, 2430, 3380, 4530, 5080, 5230)
_RNC = b"RNC\x01"


# --- RNC method 1 ---------------------------------------------------------------------------

class _Bits:
    """RNC's bit stream: 16-bit little-endian words, least significant bit first. Literal runs
    sit in the stream right after the word being read, so words fetched ahead are put back."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos, self.buf, self.n = data, pos, 0, 0

    def peek(self, k: int) -> int:
        while self.n < k:
            lo = self.data[self.pos] if self.pos < len(self.data) else 0
            hi = self.data[self.pos + 1] if self.pos + 1 < len(self.data) else 0
            self.buf |= (lo | hi << 8) << self.n
            self.n += 16
            self.pos += 2
        return self.buf & ((1 << k) - 1)

    def take(self, k: int) -> int:
        v = self.peek(k)
        self.buf >>= k
        self.n -= k
        return v

    def literal(self, count: int) -> bytes:
        ahead = self.n // 16                  # whole words fetched ahead belong to the literal
        self.pos -= 2 * ahead
        self.n -= 16 * ahead
        self.buf &= (1 << self.n) - 1
        if self.pos + count > len(self.data):
            raise DataError("RNC: a literal run goes past the end of the data")
        out = self.data[self.pos: self.pos + count]
        self.pos += count
        return out


def _huffman(bits: _Bits) -> list[tuple[int, int, int]]:
    """A block's table: up to 31 symbols' code lengths, canonical codes (shortest first), kept
    bit-reversed to match the stream's order -> [(length, code, symbol)]."""
    lengths = [bits.take(4) for _ in range(bits.take(5))]
    table, code = [], 0
    for length in range(1, 17):
        for symbol, n in enumerate(lengths):
            if n == length:
                c = code >> (16 - length)
                table.append((length, int(f"{c:0{length}b}"[::-1], 2), symbol))
                code += 1 << (16 - length)
    return table


def _value(bits: _Bits, table: list[tuple[int, int, int]]) -> int:
    ahead = bits.peek(16)
    for length, code, symbol in table:
        if ahead & ((1 << length) - 1) == code:
            bits.take(length)
            return symbol if symbol < 2 else (1 << (symbol - 1)) | bits.take(symbol - 1)
    raise DataError("RNC: a code that is in no table (corrupt data)")


def _crc16(data: bytes) -> int:
    table = _crc_table()
    crc = 0
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


@lru_cache(maxsize=1)
def _crc_table() -> tuple[int, ...]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xA001 if c & 1 else c >> 1
        out.append(c)
    return tuple(out)


def rnc_unpack(packed: bytes) -> bytes:
    """RNC method 1 data (``RNC\\x01``, lengths, CRCs, then the blocks) -> the bytes it packs.
    Raises DataError on anything else, or when the unpacked CRC is wrong."""
    if packed[:4] != _RNC or len(packed) < 18:
        raise DataError("RNC: not RNC method 1 data")
    size, packed_size, crc = struct.unpack_from(">IIH", packed, 4)
    blocks = packed[17]
    bits = _Bits(packed, 18)
    bits.take(2)                                     # two flag bits (no key, no lock)
    out = bytearray()
    for _ in range(blocks):
        literals, distances, lengths = _huffman(bits), _huffman(bits), _huffman(bits)
        for left in range(bits.take(16), 0, -1):
            n = _value(bits, literals)
            if n:
                out += bits.literal(n)
            if left > 1:
                back = _value(bits, distances) + 1
                n = _value(bits, lengths) + 2
                if back > len(out):
                    raise DataError("RNC: a copy from before the start (corrupt data)")
                for _ in range(n):                   # may overlap what it writes
                    out.append(out[-back])
    if len(out) != size or _crc16(bytes(out)) != crc:
        raise DataError(f"RNC: unpacked {len(out)} bytes of {size}, or a wrong CRC")
    return bytes(out)


# --- the text's Huffman tree, from the engine -----------------------------------------------

def find_text_trees(binary: bytes, *, min_leaves: int = 40) -> list[bytes]:
    """Every table of 3-byte nodes in ``binary`` that is a whole Huffman tree over characters:
    node 0 the root, an inner node (two children after it, character 0) or a leaf (no children),
    at least ``min_leaves`` leaves, among them the string's end (0), space, 'e' and 't'. Returns
    each tree's bytes, in file order."""
    b = np.frombuffer(binary, dtype=np.uint8)
    n = b.size - 3
    if n <= 0:
        return []
    left, right, value = b[:n], b[1:n + 1], b[2:n + 2]
    candidates = np.nonzero((value == 0) & (left > 0) & (right > 0) & (left != right))[0]
    trees = []
    for o in candidates.tolist():
        size = _tree_size(binary, o, min_leaves)
        if size:
            trees.append(binary[o: o + 3 * size])
    return trees


def _tree_size(binary: bytes, o: int, min_leaves: int) -> int:
    seen: set[int] = set()
    stack, leaves, chars = [0], 0, set()
    while stack:
        i = stack.pop()
        if i in seen:
            return 0
        seen.add(i)
        p = o + 3 * i
        if p + 3 > len(binary):
            return 0
        lc, rc, ch = binary[p], binary[p + 1], binary[p + 2]
        if lc == 0 and rc == 0:
            leaves += 1
            chars.add(ch)
        elif lc <= i or rc <= i or lc == 0 or rc == 0 or ch != 0:
            return 0
        else:
            stack += [lc, rc]
    if leaves < min_leaves or not {0, 32, ord("e"), ord("t")} <= chars:
        return 0
    return max(seen) + 1


def decode_text(section: bytes, tree: bytes, line: int) -> str:
    """Line ``line`` (0-4095) of a text section file, decoded with ``tree`` (see the module
    docstring for the layout)."""
    return _decode(section, tree, line)[0]


def _decode(section: bytes, tree: bytes, line: int, *, limit: int = 1000) -> tuple[str, bool]:
    """-> (the line's text, whether its code ends where its stored length says: within the
    2-bit boundary, or the 16 bits a long line's length is rounded to). A wrong tree makes
    printable nonsense now and then, but not of the stored length line after line."""
    u16 = lambda at: struct.unpack_from("<H", section, at)[0]  # noqa: E731
    block, index = line & 0xFE0, line & 0x1F
    try:
        quarters = sum(u16(4 + 2 * k) for k in range(block >> 5))   # 2-bit units
        p = u16(0) + block
        for k in range(index):
            skip = section[p + k]
            quarters += (skip & 0x7F) << 3 if skip & 0x80 else skip
        own = section[p + index]
        stored = 2 * ((own & 0x7F) << 3 if own & 0x80 else own)     # bits
        p = u16(2) + (quarters >> 2)
        bit = 8 - 2 * (quarters & 3)                  # bits of the byte at p still to read
        out: list[int] = []
        used = 0
        while len(out) < limit:
            node = 0
            while True:
                if bit == 0:
                    p += 1
                    bit = 8
                bit -= 1
                used += 1
                node = tree[3 * node + ((section[p] >> bit) & 1)]
                if tree[3 * node] == 0 and tree[3 * node + 1] == 0:
                    break
            ch = tree[3 * node + 2]
            if ch == 0:
                slack = 16 if own & 0x80 else 2
                return bytes(out).decode("latin-1"), stored - slack < used <= stored
            out.append(ch)
    except (IndexError, struct.error) as exc:
        raise DataError(f"text line {line}: runs past its section ({exc})") from exc
    raise DataError(f"text line {line}: no end within {limit} characters")


# --- the archive ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Entry:
    offset: int
    size: int
    packed: bool                        # may be RNC-packed (the engine then checks the header)
    header_kept: bool                   # the unpacked data starts with the 22-byte header


def read_dinner_table(dnr: bytes) -> dict[int, _Entry]:
    """``sky.dnr`` -> {file number: where it is in sky.dsk}."""
    if len(dnr) < 4:
        raise DataError("sky.dnr: too short")
    (n,) = struct.unpack_from("<I", dnr, 0)
    if len(dnr) < 4 + 8 * n:
        raise DataError(f"sky.dnr: {n} entries announced, {(len(dnr) - 4) // 8} there")
    out = {}
    for i in range(n):
        at = 4 + 8 * i
        (number,) = struct.unpack_from("<H", dnr, at)
        offset = int.from_bytes(dnr[at + 2: at + 5], "little")
        flags = int.from_bytes(dnr[at + 5: at + 8], "little")
        start = (offset & 0x7FFFFF) << 4 if offset & 0x800000 else offset & 0x7FFFFF
        out[number] = _Entry(start, flags & 0x3FFFFF, not flags & 0x800000,
                             not flags & 0x400000)
    return out


def read_file(dsk_path: Path, entry: _Entry) -> bytes:
    """One file of the archive, unpacked (with its header, as the engine keeps it)."""
    with open(dsk_path, "rb") as f:
        f.seek(entry.offset)
        raw = f.read(entry.size)
    if len(raw) != entry.size:
        raise DataError(f"{dsk_path}: a file at {entry.offset} runs past the end")
    if entry.packed and len(raw) > HEADER and raw[0] & 0x80:     # the header's packed flag
        body = rnc_unpack(raw[HEADER:])
        return raw[:HEADER] + body if entry.header_kept else body
    return raw


def speech_samples(dsk_path: Path, entry: _Entry) -> tuple[np.ndarray, int]:
    """A speech file -> (float32 samples in [-1, 1), 11,025 Hz)."""
    return unsigned_8bit(read_file(dsk_path, entry)[HEADER:]), RATE_HZ


@dataclass
class SteelSky:
    """The game's archive, its dinner table, the text tree and every spoken line's words,
    decoded once (see the module docstring)."""

    dsk: Path
    files: dict[int, _Entry]
    tree: bytes
    texts: dict[int, str]                 # spoken text number -> its words, in order

    @classmethod
    def open(cls, game_dir: str | Path, *, tree_from: str | Path) -> SteelSky:
        """``game_dir`` holds sky.dnr and sky.dsk; ``tree_from`` is ScummVM's executable."""
        game_dir = Path(game_dir)
        dsk = game_dir / "sky.dsk"
        files = read_dinner_table((game_dir / "sky.dnr").read_bytes())
        numbers = _spoken(files)
        sections = {}
        for s in sorted({n >> 12 for n in numbers}):
            if TEXT_FILE + s not in files:
                raise DataError(f"sky.dsk: no text section {s}")
            sections[s] = read_file(dsk, files[TEXT_FILE + s])
        trees = find_text_trees(Path(tree_from).read_bytes())
        for tree in trees:      # the tree every spoken line decodes with: printable, and
            try:                # each line's code as long as its stored length
                decoded = [_decode(sections[n >> 12], tree, n & 0xFFF) for n in numbers]
            except DataError:
                continue
            if numbers and all(_printable(t) and fits for t, fits in decoded):
                return cls(dsk, files, tree, {n: t for n, (t, _) in zip(numbers, decoded)})
        raise DataError(f"{tree_from}: none of its {len(trees)} Huffman trees decodes the "
                        f"game's text (another ScummVM or game version?)")

    def lines(self) -> list[tuple[int, str]]:
        """Every spoken line: (text number, its words as the game shows them)."""
        return list(self.texts.items())

    def speech_entry(self, number: int) -> _Entry:
        return self.files[SPEECH_FILE + SPEECH_BASE[number >> 12] + (number & 0xFFF)]


def _spoken(files: dict[int, _Entry]) -> list[int]:
    """The text numbers that have a speech file, in order."""
    out = []
    for section in range(len(SPEECH_BASE) - 1):
        for line in range(SPEECH_BASE[section + 1] - SPEECH_BASE[section]):
            if SPEECH_FILE + SPEECH_BASE[section] + line in files:
                out.append(section << 12 | line)
    return out


def _printable(text: str) -> bool:
    return bool(text) and all(32 <= ord(c) < 127 for c in text)
