"""MessagePack, exactly the part protocol v1 uses (docs/PROTOCOL.md §2).

The package carries its own codec instead of depending on the ``msgpack`` package:
the protocol needs only nil, bool, int, float, str, bin, array and map; decoding must
enforce the protocol's own rules (one value per frame, nesting at most 32 deep, no
``ext``); and a client with no dependency installs anywhere ``pip`` runs. It was
written from the protocol document, so the tests that drive it against the real
server also check that the document is enough to implement a client.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Mapping, Tuple

#: Deepest nesting of arrays and maps in one message (the top-level map counts 1).
MAX_DEPTH = 32

_F64 = struct.Struct(">d")
_FIXED = {
    0xCA: struct.Struct(">f"),
    0xCB: _F64,
    0xCC: struct.Struct(">B"),
    0xCD: struct.Struct(">H"),
    0xCE: struct.Struct(">I"),
    0xCF: struct.Struct(">Q"),
    0xD0: struct.Struct(">b"),
    0xD1: struct.Struct(">h"),
    0xD2: struct.Struct(">i"),
    0xD3: struct.Struct(">q"),
}
# Type byte -> size in bytes of its length field, for str/bin/array/map with a length.
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4, 0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}


class CodecError(ValueError):
    """Bytes that are not one well-formed MessagePack value of the protocol's subset."""


# ------------------------------------------------------------------------- encoding


def pack(obj: Any) -> bytes:
    """Encode ``obj`` (None, bool, int, float, str, bytes, list/tuple, str-keyed map).

    Integers use the smallest format that holds them, as the protocol recommends.
    Raises ``TypeError`` for other types or non-string map keys, and ``ValueError``
    for integers outside 64 bits or nesting deeper than :data:`MAX_DEPTH` (which also
    catches self-referencing containers).
    """
    out = bytearray()
    _pack(obj, out, 0)
    return bytes(out)


def _pack(o: Any, out: bytearray, depth: int) -> None:
    if o is None:
        out.append(0xC0)
    elif o is True:
        out.append(0xC3)
    elif o is False:
        out.append(0xC2)
    elif isinstance(o, int):
        _pack_int(int(o), out)
    elif isinstance(o, float):
        out.append(0xCB)
        out += _F64.pack(o)
    elif isinstance(o, str):
        raw = o.encode("utf-8")
        _head(out, len(raw), 0xA0, 32, 0xD9, 0xDA, 0xDB)
        out += raw
    elif isinstance(o, (bytes, bytearray, memoryview)):
        raw = bytes(o)
        _head(out, len(raw), None, 0, 0xC4, 0xC5, 0xC6)
        out += raw
    elif isinstance(o, (list, tuple)):
        _deeper(depth)
        _head(out, len(o), 0x90, 16, None, 0xDC, 0xDD)
        for item in o:
            _pack(item, out, depth + 1)
    elif isinstance(o, Mapping):
        _deeper(depth)
        _head(out, len(o), 0x80, 16, None, 0xDE, 0xDF)
        for key, value in o.items():
            if not isinstance(key, str):
                raise TypeError("map keys must be strings, not %s" % type(key).__name__)
            _pack(key, out, depth + 1)
            _pack(value, out, depth + 1)
    else:
        raise TypeError("cannot encode a %s as MessagePack" % type(o).__name__)


def _pack_int(n: int, out: bytearray) -> None:
    if 0 <= n < 0x80:
        out.append(n)
    elif -32 <= n < 0:
        out.append(n & 0xFF)
    elif n >= 0:
        for tag, top in ((0xCC, 1 << 8), (0xCD, 1 << 16), (0xCE, 1 << 32), (0xCF, 1 << 64)):
            if n < top:
                out.append(tag)
                out += _FIXED[tag].pack(n)
                return
        raise ValueError("integer %d does not fit in 64 bits" % n)
    else:
        for tag, low in ((0xD0, -(1 << 7)), (0xD1, -(1 << 15)), (0xD2, -(1 << 31)), (0xD3, -(1 << 63))):
            if n >= low:
                out.append(tag)
                out += _FIXED[tag].pack(n)
                return
        raise ValueError("integer %d does not fit in 64 bits" % n)


def _head(out: bytearray, n: int, fix: int | None, fix_max: int, t8: int | None, t16: int, t32: int) -> None:
    if fix is not None and n < fix_max:
        out.append(fix | n)
    elif t8 is not None and n < 1 << 8:
        out.append(t8)
        out.append(n)
    elif n < 1 << 16:
        out.append(t16)
        out += n.to_bytes(2, "big")
    elif n < 1 << 32:
        out.append(t32)
        out += n.to_bytes(4, "big")
    else:
        raise ValueError("%d items or bytes is too many for MessagePack" % n)


def _deeper(depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise ValueError("arrays and maps nest deeper than %d levels" % MAX_DEPTH)


# ------------------------------------------------------------------------- decoding


def unpack(data: bytes) -> Any:
    """Decode exactly one value that fills ``data`` (nothing may trail it).

    Raises :class:`CodecError` for truncated or trailing bytes, ``ext`` types, the
    reserved byte ``0xc1``, invalid UTF-8 in a string, unhashable map keys, or nesting
    deeper than :data:`MAX_DEPTH`.
    """
    view = memoryview(data)
    value, pos = _Decoder(view).value(0, 0)
    if pos != len(view):
        raise CodecError("%d bytes after the value" % (len(view) - pos))
    return value


class _Decoder:
    __slots__ = ("d",)

    def __init__(self, d: memoryview) -> None:
        self.d = d

    def _take(self, pos: int, n: int) -> Tuple[memoryview, int]:
        end = pos + n
        if end > len(self.d):
            raise CodecError("a value runs past the end of the frame")
        return self.d[pos:end], end

    def value(self, pos: int, depth: int) -> Tuple[Any, int]:
        """Decode the value at ``pos`` (enclosed in ``depth`` containers)."""
        if pos >= len(self.d):
            raise CodecError("a value runs past the end of the frame")
        b = self.d[pos]
        pos += 1
        if b <= 0x7F:
            return b, pos
        if b >= 0xE0:
            return b - 0x100, pos
        if b <= 0x8F:
            return self._map(pos, b & 0x0F, depth)
        if b <= 0x9F:
            return self._array(pos, b & 0x0F, depth)
        if b <= 0xBF:
            return self._str(pos, b & 0x1F)
        if b == 0xC0:
            return None, pos
        if b in (0xC2, 0xC3):
            return b == 0xC3, pos
        fixed = _FIXED.get(b)
        if fixed is not None:
            raw, pos = self._take(pos, fixed.size)
            return fixed.unpack(raw)[0], pos
        width = _SIZED.get(b)
        if width is None:
            raise CodecError("unsupported MessagePack type byte 0x%02x (ext is not used)" % b)
        raw, pos = self._take(pos, width)
        n = int.from_bytes(raw, "big")
        if b in (0xDC, 0xDD):
            return self._array(pos, n, depth)
        if b in (0xDE, 0xDF):
            return self._map(pos, n, depth)
        if b >= 0xD9:
            return self._str(pos, n)
        raw, pos = self._take(pos, n)
        return bytes(raw), pos

    def _str(self, pos: int, n: int) -> Tuple[str, int]:
        raw, pos = self._take(pos, n)
        try:
            return str(raw, "utf-8"), pos
        except UnicodeDecodeError as e:
            raise CodecError("a string is not valid UTF-8: %s" % e) from None

    def _array(self, pos: int, n: int, depth: int) -> Tuple[List[Any], int]:
        self._check(depth, pos, n)
        out = []
        for _ in range(n):
            item, pos = self.value(pos, depth + 1)
            out.append(item)
        return out, pos

    def _map(self, pos: int, n: int, depth: int) -> Tuple[Dict[Any, Any], int]:
        self._check(depth, pos, 2 * n)
        out = {}
        for _ in range(n):
            key, pos = self.value(pos, depth + 1)
            value, pos = self.value(pos, depth + 1)
            try:
                out[key] = value
            except TypeError:
                raise CodecError("a map key is an array or a map") from None
        return out, pos

    def _check(self, depth: int, pos: int, items: int) -> None:
        if depth >= MAX_DEPTH:
            raise CodecError("arrays and maps nest deeper than %d levels" % MAX_DEPTH)
        # Every item takes at least one byte: a lying count fails here, before a loop.
        if items > len(self.d) - pos:
            raise CodecError("a container claims more items than the frame holds")
