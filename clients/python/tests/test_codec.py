"""The package's MessagePack codec and framing, byte for byte against the examples of
docs/PROTOCOL.md §2.1, and against hostile input."""

from __future__ import annotations

import math
import struct

import pytest

from toolvisor import _core, _msgpack
from toolvisor._msgpack import MAX_DEPTH, CodecError, pack, unpack


def test_the_ping_example_of_the_protocol_document() -> None:
    frame = _core.encode_frame({"type": "ping", "id": "p1"})
    assert frame.hex(" ") == "00 00 00 11 82 a4 74 79 70 65 a4 70 69 6e 67 a2 69 64 a2 70 31"


def test_the_hello_example_of_the_protocol_document() -> None:
    frame = _core.encode_frame(_core.hello_message("py", False))
    want = "00 00 00 2d 84 a4 74 79 70 65 a5 68 65 6c 6c 6f a8 70 72 6f 74 6f 63 6f 6c 01"
    want += " a6 63 6c 69 65 6e 74 a2 70 79 ab 69 6e 74 65 72 61 63 74 69 76 65 c2"
    assert frame.hex(" ") == want
    assert len(frame) == 49


def test_the_integer_id_answer_of_the_protocol_document() -> None:
    body = bytes.fromhex("82a474797065a4706f6e67a2696407")
    assert _core.decode_message(body) == {"type": "pong", "id": 7}
    assert isinstance(_core.decode_message(body)["id"], int)


@pytest.mark.parametrize(
    "value, encoded",
    [
        (None, "c0"),
        (True, "c3"),
        (False, "c2"),
        (0, "00"),
        (127, "7f"),
        (128, "cc80"),
        (255, "ccff"),
        (256, "cd0100"),
        (65536, "ce00010000"),
        (1 << 32, "cf0000000100000000"),
        ((1 << 64) - 1, "cfffffffffffffffff"),
        (-1, "ff"),
        (-32, "e0"),
        (-33, "d0df"),
        (-129, "d1ff7f"),
        (-32769, "d2ffff7fff"),
        (-(1 << 63), "d38000000000000000"),
        (1.5, "cb3ff8000000000000"),
        ("", "a0"),
        ("a" * 31, "bf" + "61" * 31),
        ("a" * 32, "d920" + "61" * 32),
        ("é", "a2c3a9"),
        (b"\x00\x01", "c4020001"),
        ([], "90"),
        ([1, [2]], "920191" + "02"),
        ({}, "80"),
        ({"k": None}, "81a16bc0"),
    ],
)
def test_smallest_formats_and_round_trips(value: object, encoded: str) -> None:
    assert pack(value).hex() == encoded
    assert unpack(bytes.fromhex(encoded)) == value


def test_long_containers_and_strings_use_16_and_32_bit_lengths() -> None:
    for n, tag in ((16, 0xDC), (70000, 0xDD)):
        data = pack(list(range(n)))
        assert data[0] == tag and unpack(data) == list(range(n))
    m = {str(i): i for i in range(20)}
    assert pack(m)[0] == 0xDE and unpack(pack(m)) == m
    s = "x" * 70000
    assert pack(s)[0] == 0xDB and unpack(pack(s)) == s
    assert pack(("t", "u")) == pack(["t", "u"])


def test_every_decoder_format_the_server_may_send() -> None:
    assert unpack(b"\xca" + struct.pack(">f", 2.5)) == 2.5  # cpu_percent is float32
    assert math.isnan(unpack(b"\xcb" + struct.pack(">d", float("nan"))))
    assert unpack(b"\xd9\x03abc") == "abc"
    assert unpack(b"\xda\x00\x03abc") == "abc"
    assert unpack(b"\xc5\x00\x01z") == b"z" and unpack(b"\xc6\x00\x00\x00\x01z") == b"z"
    assert unpack(b"\xdf\x00\x00\x00\x01\xa1a\x01") == {"a": 1}


def test_nesting_up_to_32_levels_and_no_deeper() -> None:
    def nested(levels: int) -> object:
        v: object = None
        for _ in range(levels):
            v = [v]
        return v

    assert unpack(pack(nested(MAX_DEPTH))) == nested(MAX_DEPTH)
    with pytest.raises(ValueError):
        pack(nested(MAX_DEPTH + 1))
    with pytest.raises(CodecError, match="deeper"):
        unpack(b"\x91" * (MAX_DEPTH + 1) + b"\xc0")
    with pytest.raises(CodecError, match="deeper"):
        unpack(b"\x91" * 100_000 + b"\xc0")  # an error, never a RecursionError
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        pack(loop)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "past the end"),
        (b"\xc0\xc0", "after the value"),
        (b"\xc1", "unsupported"),
        (b"\xd4\x01\x02", "unsupported"),  # fixext 1
        (b"\xc7\x01\x01\x02", "unsupported"),  # ext 8
        (b"\xa3ab", "past the end"),
        (b"\xa2\xff\xfe", "UTF-8"),
        (b"\xdd\xff\xff\xff\xff", "more items"),
        (b"\xdb\xff\xff\xff\xff", "past the end"),
        (b"\x81\x90\x01", "map key"),
        (b"\xcd\x01", "past the end"),
    ],
)
def test_malformed_input_is_a_codec_error(data: bytes, why: str) -> None:
    with pytest.raises(CodecError, match=why):
        unpack(data)


def test_what_cannot_be_packed() -> None:
    with pytest.raises(TypeError):
        pack({1: "int key"})
    with pytest.raises(TypeError):
        pack(object())
    with pytest.raises(ValueError):
        pack(1 << 64)
    with pytest.raises(ValueError):
        pack(-(1 << 63) - 1)
    assert pack(True) != pack(1)  # bool is not packed as int


def test_framing_refuses_what_is_not_a_message() -> None:
    with pytest.raises(_core.ProtocolError):
        _core.decode_message(_msgpack.pack([1]))
    with pytest.raises(_core.ProtocolError):
        _core.decode_message(_msgpack.pack({"type": 3}))
    with pytest.raises(_core.ProtocolError):
        _core.frame_length((_core.MAX_INCOMING_FRAME + 1).to_bytes(4, "big"))
    assert _core.frame_length(b"\x00\x00\x01\x00") == 256


def test_decoding_a_large_result_is_fast_enough() -> None:
    import time

    msg = {"type": "result", "id": "c1", "content": "x" * (8 << 20), "meta": {"rows": list(range(20000))}}
    data = pack(msg)
    start = time.perf_counter()
    assert unpack(data) == msg
    assert time.perf_counter() - start < 5  # generous: a loaded 2-core machine
