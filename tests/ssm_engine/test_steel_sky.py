"""Beneath a Steel Sky's archive read as the engine reads it: RNC-packed files, Huffman-coded
text with the tree found in an engine executable, speech files numbered by text line. The
fixtures are made here by small encoders that write each format from its description."""

from __future__ import annotations

import logging
import struct

import numpy as np
import pytest

from ssm_engine.data.errors import DataError
from ssm_engine.data.human_train import TRAIN_SOURCES, find_train_clips
from ssm_engine.data.steel_sky import (
    SPEECH_BASE,
    SteelSky,
    decode_text,
    find_text_trees,
    rnc_unpack,
)
from ssm_engine.stt.cli import PEOPLE_SOURCES

# --- RNC method 1, written --------------------------------------------------------------------


class _BitWriter:
    """RNC's stream: bits into 16-bit little-endian words from the least significant bit; a
    literal run goes right after the word being filled (or at the end when it is full)."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.slot = 0
        self.used = 16

    def bits(self, value: int, k: int) -> None:
        for i in range(k):
            if self.used == 16:
                self.slot, self.used = len(self.out), 0
                self.out += b"\0\0"
            if value >> i & 1:
                self.out[self.slot + self.used // 8] |= 1 << (self.used % 8)
            self.used += 1

    def code(self, code: int, length: int) -> None:      # a Huffman code: its first bit first
        for j in reversed(range(length)):
            self.bits(code >> j & 1, 1)

    def value(self, v: int) -> None:
        """A number as its symbol (every table here: 16 symbols of 4 bits, code = symbol) and
        the symbol's extra bits."""
        symbol = v if v < 2 else v.bit_length()
        self.code(symbol, 4)
        if symbol >= 2:
            self.bits(v - (1 << (symbol - 1)), symbol - 1)


def _crc16_bitwise(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def _rnc_pack(data: bytes, copy_at: int | None = None) -> bytes:
    """``data`` as literals, except, when ``copy_at`` is given, its 6 bytes from there are a copy
    of the 6 bytes 3 back (an overlapping copy: data[copy_at-3:copy_at] must repeat twice)."""
    w = _BitWriter()
    w.bits(0, 2)
    for _ in range(3):                                    # literals, distances, lengths tables
        w.bits(16, 5)
        for _ in range(16):
            w.bits(4, 4)
    if copy_at is None:
        w.bits(1, 16)
        w.value(len(data))
        w.out += data
    else:
        assert data[copy_at: copy_at + 6] == data[copy_at - 3: copy_at] * 2
        w.bits(2, 16)
        w.value(copy_at)
        w.out += data[:copy_at]
        w.value(3 - 1)                                    # distance 3
        w.value(6 - 2)                                    # length 6
        rest = data[copy_at + 6:]
        w.value(len(rest))
        w.out += rest
    body = bytes(w.out)
    return (b"RNC\x01" + struct.pack(">IIHH", len(data), len(body), _crc16_bitwise(data),
                                     _crc16_bitwise(body)) + bytes([0, 1]) + body)


def test_rnc_unpacks_literals_and_an_overlapping_copy():
    data = bytes(range(40)) + b"abcabcabc" + bytes(range(200, 250))
    assert rnc_unpack(_rnc_pack(data)) == data
    assert rnc_unpack(_rnc_pack(data, copy_at=43)) == data
    # a long literal run (its length needs a big symbol) and a bit stream crossing many words
    noise = np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    assert rnc_unpack(_rnc_pack(noise)) == noise


def test_rnc_refuses_what_is_not_rnc_or_does_not_check_out():
    packed = bytearray(_rnc_pack(b"hello there, hello there"))
    with pytest.raises(DataError, match="not RNC"):
        rnc_unpack(b"ZIP!" + bytes(packed[4:]))
    packed[12] ^= 0xFF                                    # the unpacked data's CRC
    with pytest.raises(DataError, match="CRC"):
        rnc_unpack(bytes(packed))
    with pytest.raises(DataError, match="past the end"):
        rnc_unpack(_rnc_pack(b"x" * 300)[:100])          # cut inside the literal run


# --- the text: a Huffman tree of 3-byte nodes, lines from 2-bit boundaries --------------------

def _tree(chars: str) -> tuple[bytes, dict[str, str]]:
    """A Huffman tree over ``chars`` (their order decides the shape) as the engine's table of
    (left, right, character) nodes, children after their parent -> (bytes, char -> its bits)."""
    nodes: list[list[int]] = []
    codes: dict[str, str] = {}

    def build(cs: str, path: str) -> int:
        i = len(nodes)
        nodes.append([0, 0, 0])
        if len(cs) == 1:
            nodes[i][2] = ord(cs)
            codes[cs] = path
        else:
            half = len(cs) // 2
            nodes[i][0] = build(cs[:half], path + "0")
            nodes[i][1] = build(cs[half:], path + "1")
        return i

    build(chars, "")
    return bytes(b for n in nodes for b in n), codes


def _section(lines: list[str], codes: dict[str, str]) -> bytes:
    """A text section file: [skip table at][bit stream at][32-line block lengths][a length a
    line][lines' bits, each from a 2-bit boundary]; lengths in 2-bit units, a long one rounded
    to 8 units and stored as 0x80 | units / 8."""
    bits, skips = "", []
    for text in lines:
        b = "".join(codes[c] for c in text + "\0")
        units = -(-len(b) // 2)
        if units >= 128:
            units = -(-units // 8) * 8
            skips.append(0x80 | units >> 3)
        else:
            skips.append(units)
        bits += b.ljust(2 * units, "0")
    units_of = [(s & 0x7F) << 3 if s & 0x80 else s for s in skips]
    blocks = [sum(units_of[k: k + 32]) for k in range(0, len(lines), 32)]
    bits = bits.ljust(-(-len(bits) // 8) * 8, "0")
    stream = bytes(int(bits[i: i + 8], 2) for i in range(0, len(bits), 8))
    table_at = 4 + 2 * len(blocks)
    head = struct.pack("<HH", table_at, table_at + len(skips))
    return head + struct.pack(f"<{len(blocks)}H", *blocks) + bytes(skips) + stream + b"\0\0"


ALPHABET = "\0 !',.?ACDEHIKLNOPSTWYabcdefghiklmnoprstuvwy-"


def _lines() -> list[str]:
    words = ["Hello?", "Who IS this?", "I had to INSPECT it.", "Hey!", "What's it for?"]
    lines = [words[i % len(words)] + (" " + "a" * (i % 7)) * (i % 3) for i in range(40)]
    lines[33] = "That could be a WAY IN. " * 9                  # a long one (>= 128 units)
    return lines


def test_text_lines_decode_across_blocks_and_long_lines():
    tree, codes = _tree(ALPHABET)
    lines = _lines()
    section = _section(lines, codes)
    assert [decode_text(section, tree, i) for i in range(len(lines))] == lines
    with pytest.raises(DataError, match="runs past"):
        decode_text(section[:40], tree, 39)


def _binary(*trees: bytes) -> bytes:
    """An 'executable': noise with the trees inside it."""
    noise = np.random.default_rng(1).integers(0, 256, 20000, dtype=np.uint8).tobytes()
    out = bytearray(noise)
    for k, t in enumerate(trees):
        at = 3000 + 6000 * k
        out[at: at + len(t)] = t
    return bytes(out)


def test_the_text_trees_are_found_in_an_executable():
    tree, _ = _tree(ALPHABET)
    small, _ = _tree("\0 et")                             # too few leaves to be a text's tree
    found = find_text_trees(_binary(small, tree), min_leaves=10)
    assert found == [tree]
    assert find_text_trees(b"") == []


# --- the archive --------------------------------------------------------------------------

def _archive(files: dict[int, tuple[bytes, str]]) -> tuple[bytes, bytes]:
    """-> (sky.dnr, sky.dsk). ``files``: number -> (data, how): 'plain' (flags bit 23),
    'plain16' (its offset stored in 16-byte units, offset bit 23), 'packed' (data's first 22
    bytes are its header, the rest RNC-packed after it; the header kept) or 'packed-bare' (all
    of data packed after a header that is dropped: flags bit 22)."""
    dsk = bytearray()
    entries = []
    for number, (data, how) in files.items():
        while len(dsk) % 16:
            dsk += b"\0"
        offset = len(dsk)
        if how == "packed":
            blob = struct.pack("<H", 0x0080) + bytes(20) + _rnc_pack(data[22:])
            flags = len(blob)
        elif how == "packed-bare":
            blob = struct.pack("<H", 0x0080) + bytes(20) + _rnc_pack(data)
            flags = len(blob) | 0x400000
        else:
            blob = data
            flags = len(blob) | 0x800000
        stored = (offset >> 4) | 0x800000 if how == "plain16" else offset
        entries.append(struct.pack("<H", number) + stored.to_bytes(3, "little")
                       + flags.to_bytes(3, "little"))
        dsk += blob
    return struct.pack("<I", len(entries)) + b"".join(entries), bytes(dsk)


def _speech(seconds: float, f_hz: float) -> bytes:
    t = np.arange(int(seconds * 11025)) / 11025
    samples = (128 + 60 * np.sin(2 * np.pi * f_hz * t)).astype(np.uint8).tobytes()
    return bytes(22) + samples


def _game(tmp_path, *, with_engine: bool = True):
    tree, codes = _tree(ALPHABET)
    decoy = bytearray(tree)              # the same shape, 'a' stored as 0x85: not printable
    decoy[decoy.index(ord("a"))] = 0x85
    lines0 = _lines()
    lines1 = ["Poor Spunky is in the LAKE!", "Hello? Who IS this?", "unused", "Hey, you - OPEN it!"]
    files = {60600: (_section(lines0, codes), "packed-bare"),
             60601: (_section(lines1, codes), "plain"),
             50000 + 7: (_speech(1.0, 220.0), "packed"),
             50000 + 33: (_speech(0.5, 300.0), "plain16"),
             50000 + SPEECH_BASE[1] + 3: (_speech(0.8, 250.0), "plain"),
             60150: (b"a font, not text", "plain")}
    dnr, dsk = _archive(files)
    game = tmp_path / "beneath-a-steel-sky/usr/share/scummvm/beneath-a-steel-sky"
    game.mkdir(parents=True)
    (game / "sky.dnr").write_bytes(dnr)
    (game / "sky.dsk").write_bytes(dsk)
    if with_engine:
        engine = tmp_path / "scummvm/usr/games/scummvm"
        engine.parent.mkdir(parents=True)
        engine.write_bytes(_binary(bytes(decoy), tree))
    return game, lines0, lines1


def test_the_game_gives_each_spoken_line_its_words_and_speech(tmp_path):
    game, lines0, lines1 = _game(tmp_path)
    sky = SteelSky.open(game, tree_from=tmp_path / "scummvm/usr/games/scummvm")
    assert sky.lines() == [(7, lines0[7]), (33, lines0[33]), (1 << 12 | 3, lines1[3])]


def test_steel_sky_is_a_training_source_with_its_speech(tmp_path, caplog):
    _game(tmp_path)
    steelsky = tuple(s for s in TRAIN_SOURCES if s.name == "steelsky")
    clips = find_train_clips(tmp_path, root=tmp_path / "nothing", sources=steelsky)
    assert [(c.key, c.text, c.speaker) for c in clips] == [
        ("steelsky/7", "i had to inspect it", "steelsky:part0"),
        ("steelsky/33", ("that could be a way in " * 9).strip(), "steelsky:part0"),
        ("steelsky/4099", "hey you open it", "steelsky:part1")]
    for clip, seconds, f_hz in zip(clips, (1.0, 0.5, 0.8), (220.0, 300.0, 250.0)):
        x, rate = clip.load()
        assert rate == 11025 and x.size == int(seconds * rate)
        peak = np.argmax(np.abs(np.fft.rfft(x))) * rate / x.size
        assert abs(peak - f_hz) < 3 and np.abs(x).max() < 0.5
    # the game without the engine: no lines, and the log says what is missing
    other = tmp_path / "other"
    other.mkdir()
    _game(other, with_engine=False)
    with caplog.at_level(logging.WARNING):
        assert find_train_clips(other, root=tmp_path / "nothing", sources=steelsky) == []
    assert "ScummVM" in caplog.text


def test_an_engine_without_the_games_tree_is_a_clear_error(tmp_path):
    game, _, _ = _game(tmp_path)
    wrong = tmp_path / "wrong"
    # a tree of the same printable characters in another order: nonsense that is printable,
    # but not as long as the lengths stored for the lines
    wrong.write_bytes(_binary(_tree(ALPHABET[::-1])[0]))
    with pytest.raises(DataError, match="none of its 1 Huffman trees"):
        SteelSky.open(game, tree_from=wrong)


def test_the_command_line_names_every_training_source():
    assert tuple(s.name for s in TRAIN_SOURCES) == PEOPLE_SOURCES
