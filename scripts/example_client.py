#!/usr/bin/env python3
"""A dependency-free toolvisor client, written from docs/PROTOCOL.md alone.

    python3 scripts/example_client.py --workspace W tools
    python3 scripts/example_client.py --workspace W call read_file '{"path":"README.md"}'
    python3 scripts/example_client.py --socket S selftest

`call` prints the `result` as JSON on stdout (streamed output goes to stderr) and exits
0 when its status is `ok`, 1 otherwise. `selftest` calls the five search tools and exits
0 only if every one of them ends `ok`. Exit 2: connection or protocol failure.
"""

import argparse
import hashlib
import json
import os
import socket
import struct
import sys

PROTOCOL = 1
MAX_DEPTH = 32
MAX_FRAME = 64 << 20  # what this client accepts from the server

# ---------------------------------------------------------------- MessagePack (subset)


def pack(o):
    """nil, bool, int, float, str, bytes, list/tuple, dict -> MessagePack bytes."""
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 0x80:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack(">b", o)
        if o >= 0:
            for tag, fmt, top in ((0xCC, ">B", 1 << 8), (0xCD, ">H", 1 << 16), (0xCE, ">I", 1 << 32), (0xCF, ">Q", 1 << 64)):
                if o < top:
                    return bytes([tag]) + struct.pack(fmt, o)
        else:
            for tag, fmt, low in ((0xD0, ">b", -(1 << 7)), (0xD1, ">h", -(1 << 15)), (0xD2, ">i", -(1 << 31)), (0xD3, ">q", -(1 << 63))):
                if o >= low:
                    return bytes([tag]) + struct.pack(fmt, o)
        raise ValueError("integer out of MessagePack range: %d" % o)
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, str):
        b = o.encode("utf-8")
        return _head(len(b), 0xA0, 32, 0xD9, 0xDA, 0xDB) + b
    if isinstance(o, (bytes, bytearray)):
        return _head(len(o), None, 0, 0xC4, 0xC5, 0xC6) + bytes(o)
    if isinstance(o, (list, tuple)):
        return _head(len(o), 0x90, 16, None, 0xDC, 0xDD) + b"".join(pack(x) for x in o)
    if isinstance(o, dict):
        return _head(len(o), 0x80, 16, None, 0xDE, 0xDF) + b"".join(pack(k) + pack(v) for k, v in o.items())
    raise TypeError("cannot pack %r" % type(o))


def _head(n, fix, fix_max, t8, t16, t32):
    if fix is not None and n < fix_max:
        return bytes([fix | n])
    if t8 is not None and n < 1 << 8:
        return bytes([t8, n])
    if n < 1 << 16:
        return bytes([t16]) + struct.pack(">H", n)
    if n < 1 << 32:
        return bytes([t32]) + struct.pack(">I", n)
    raise ValueError("too long for MessagePack")


def unpack(data):
    """One MessagePack value that must fill `data` exactly (nesting at most 32)."""
    value, pos = _unpack(memoryview(data), 0, 0)
    if pos != len(data):
        raise ValueError("%d bytes after the value" % (len(data) - pos))
    return value


def _take(d, pos, n):
    if pos + n > len(d):
        raise ValueError("value runs past the end of the frame")
    return bytes(d[pos:pos + n]), pos + n


def _unpack(d, pos, depth):
    """`depth`: how many arrays/maps enclose this value."""
    (b,), pos = _take(d, pos, 1)
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0x80 <= b <= 0x8F:
        return _map(d, pos, b & 0x0F, depth)
    if 0x90 <= b <= 0x9F:
        return _array(d, pos, b & 0x0F, depth)
    if 0xA0 <= b <= 0xBF:
        raw, pos = _take(d, pos, b & 0x1F)
        return raw.decode("utf-8"), pos
    if b == 0xC0:
        return None, pos
    if b in (0xC2, 0xC3):
        return b == 0xC3, pos
    fixed = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
             0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if b in fixed:
        raw, pos = _take(d, pos, struct.calcsize(fixed[b]))
        return struct.unpack(fixed[b], raw)[0], pos
    sized = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4, 0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}
    if b in sized:
        raw, pos = _take(d, pos, sized[b])
        n = int.from_bytes(raw, "big")
        if b in (0xDC, 0xDD):
            return _array(d, pos, n, depth)
        if b in (0xDE, 0xDF):
            return _map(d, pos, n, depth)
        raw, pos = _take(d, pos, n)
        return (raw.decode("utf-8") if b >= 0xD9 else raw), pos
    raise ValueError("unsupported MessagePack byte 0x%02x (ext types are not used)" % b)


def _nest(depth):
    if depth + 1 > MAX_DEPTH:
        raise ValueError("arrays/maps nested deeper than %d" % MAX_DEPTH)


def _array(d, pos, n, depth):
    _nest(depth)
    out = []
    for _ in range(n):
        v, pos = _unpack(d, pos, depth + 1)
        out.append(v)
    return out, pos


def _map(d, pos, n, depth):
    _nest(depth)
    out = {}
    for _ in range(n):
        k, pos = _unpack(d, pos, depth + 1)
        v, pos = _unpack(d, pos, depth + 1)
        out[k] = v
    return out, pos


# ---------------------------------------------------------------- transport and session


class ProtocolError(Exception):
    pass


def default_socket(workspace):
    """PROTOCOL.md §1: <workspace>/.toolvisor/toolvisor.sock, or the hashed fallback."""
    ws = os.path.realpath(workspace)
    state = os.path.join(ws, ".toolvisor")
    inside = os.path.join(state, "toolvisor.sock")
    if len(os.fsencode(inside)) <= 107:
        return inside
    digest = hashlib.sha256(os.fsencode(ws)).hexdigest()[:16]
    base = os.environ.get("XDG_RUNTIME_DIR") or ""
    if not os.path.isdir(base):
        base = "/tmp"
    return os.path.join(base, "toolvisor-%s.sock" % digest)


class Connection:
    def __init__(self, path, timeout):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.session = None

    def send(self, msg):
        body = pack(msg)
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _exactly(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ProtocolError("the server closed the connection")
            buf += chunk
        return bytes(buf)

    def recv(self):
        (n,) = struct.unpack(">I", self._exactly(4))
        if n > MAX_FRAME:
            raise ProtocolError("frame of %d bytes is too large" % n)
        msg = unpack(self._exactly(n))
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            raise ProtocolError("not a message: %r" % (msg,))
        return msg

    def hello(self, client="example_client.py"):
        self.send({"type": "hello", "protocol": PROTOCOL, "client": client, "interactive": False})
        m = self.recv()
        if m["type"] != "welcome":
            raise ProtocolError("hello refused: %s" % json.dumps(m.get("error", m)))
        self.session = m.get("session")
        return m

    def request(self, msg, answer):
        """Send a request with an `id`; return the `answer` message with the same id."""
        self.send(msg)
        while True:
            m = self.recv()
            if m["type"] == "error" and "id" not in m:
                raise ProtocolError("%s: %s" % (m["error"].get("type"), m["error"].get("message")))
            if m.get("id") != msg["id"]:
                continue  # not ours (events, other calls): ignore
            if m["type"] == "error":
                raise ProtocolError("%s: %s" % (m["error"].get("type"), m["error"].get("message")))
            if m["type"] == answer:
                return m

    def start_call(self, call_id, tool, args, stream=False):
        msg = {"type": "call", "id": call_id, "tool": tool, "args": args}
        if stream:
            msg["stream"] = True
        self.send(msg)

    def results(self, ids, on_output=None):
        """Read until every call in `ids` has its `result`; return {id: result}."""
        pending, done = set(ids), {}
        while pending:
            m = self.recv()
            t, mid = m["type"], m.get("id")
            if t == "output" and mid in pending and on_output:
                on_output(m)
            elif t == "result" and mid in pending:
                pending.discard(mid)
                done[mid] = m
            elif t == "error" and (mid in pending or "id" not in m):
                # A connection-level refusal (e.g. DuplicateCallId): no result follows.
                raise ProtocolError("call %r refused: %s: %s" % (mid, m["error"].get("type"), m["error"].get("message")))
        return done


# ---------------------------------------------------------------- commands

RESULT_FIELDS = {"id", "status", "content", "display", "meta", "duration_ms", "audit_seq"}
SEARCH_TOOLS = ["read_file", "read_many_files", "ls", "glob", "grep"]


def list_tools(conn):
    return conn.request({"type": "list_tools", "id": "tools"}, "tools")["tools"]


def cmd_tools(conn, _args):
    for t in list_tools(conn):
        aliases = " (alias %s)" % ", ".join(t["aliases"]) if t.get("aliases") else ""
        print("%-20s %-6s %-6s%s" % (t["name"], t["group"], t["risk"], aliases))
    return 0


def cmd_call(conn, args):
    try:
        call_args = json.loads(args.args)
    except ValueError as e:
        raise SystemExit("example_client: ARGS is not JSON: %s" % e)
    if not isinstance(call_args, dict):
        raise SystemExit("example_client: ARGS must be a JSON object")
    names = {n for t in list_tools(conn) for n in [t["name"]] + list(t.get("aliases", []))}
    if args.tool not in names:
        print("example_client: warning: the server does not list `%s`" % args.tool, file=sys.stderr)
    conn.start_call("call-1", args.tool, call_args, stream=args.stream)
    out = lambda m: sys.stderr.write(m["data"])  # noqa: E731
    result = conn.results(["call-1"], on_output=out)["call-1"]
    print(json.dumps(result, indent=2, ensure_ascii=False, default=lambda b: b.hex()))
    return 0 if result["status"] == "ok" else 1


def cmd_selftest(conn, _args):
    failures = []

    def check(name, r):
        missing = RESULT_FIELDS - set(r)
        ok = r["status"] == "ok" and not missing
        why = "missing fields %s" % sorted(missing) if missing else json.dumps(r.get("error"))
        print("%-4s %-16s %s" % ("ok" if ok else "FAIL", name, r["display"] if ok else why))
        if not ok:
            failures.append(name)

    conn.request({"type": "ping", "id": "ping-1"}, "pong")
    listed = {t["name"] for t in list_tools(conn)}
    absent = [t for t in SEARCH_TOOLS if t not in listed]
    if absent:
        print("FAIL tools not listed: %s" % ", ".join(absent))
        return 1
    # Phase 1: three calls in flight at once on one connection; one has an integer id,
    # which the result must echo as an integer.
    conn.start_call("ls-1", "ls", {"path": "."})
    conn.start_call(2, "glob", {"pattern": "**/*"})
    conn.start_call("grep-1", "grep", {"pattern": r"\S", "maxResults": 5})
    r = conn.results(["ls-1", 2, "grep-1"])
    if not isinstance(r[2]["id"], int):
        failures.append("integer id echo")
    check("ls", r["ls-1"])
    check("glob", r[2])
    check("grep", r["grep-1"])
    files = [p for p in r[2]["content"].splitlines() if p and not p.startswith("[Output truncated")]
    # Phase 2: read a file the glob found (the first one that is text).
    chosen = None
    for i, path in enumerate(files[:10]):
        conn.start_call("read-%d" % i, "read_file", {"path": path})
        rr = conn.results(["read-%d" % i])["read-%d" % i]
        if rr["status"] == "ok":
            chosen = path
            check("read_file", rr)
            break
    if chosen is None:
        print("FAIL read_file        no readable text file found by glob")
        failures.append("read_file")
        chosen = files[0] if files else "."
    conn.start_call("many-1", "read_many_files", {"paths": [chosen]})
    check("read_many_files", conn.results(["many-1"])["many-1"])
    print("selftest: %s" % ("ok" if not failures else "FAILED: " + ", ".join(failures)))
    return 0 if not failures else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workspace", default=".", help="workspace directory (default: .)")
    p.add_argument("--socket", help="socket path (default: $TOOLVISOR_SOCKET, else derived from --workspace)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the server (default 60)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("tools", help="list the tools")
    c = sub.add_parser("call", help="call a tool and print its result as JSON")
    c.add_argument("tool")
    c.add_argument("args", nargs="?", default="{}", help="arguments as a JSON object")
    c.add_argument("--stream", action="store_true", help="ask for output frames (to stderr)")
    sub.add_parser("selftest", help="call the five search tools; exit 0 if all are ok")
    args = p.parse_args(argv)
    path = args.socket or os.environ.get("TOOLVISOR_SOCKET") or default_socket(args.workspace)
    try:
        conn = Connection(path, args.timeout)
        conn.hello()
        return {"tools": cmd_tools, "call": cmd_call, "selftest": cmd_selftest}[args.command](conn, args)
    except (OSError, ProtocolError, ValueError) as e:
        print("example_client: %s: %s" % (path, e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
