"""Write an external worker in Python: the other side of toolvisor's worker protocol.

An external worker is a program toolvisor starts for a group configured as
``[workers.NAME] command = ["python3", "my_worker.py"]``. It talks to the supervisor on
file descriptor 3 with the same frames as clients (docs/PROTOCOL.md, "Worker protocol"):

1. it reads ``init`` (the workspace roots, limits, its group and index);
2. it answers ``ready`` with the tools it serves (name, description, ``inputSchema``,
   optional ``risk``, ``paths`` and MCP ``annotations``);
3. it answers every ``run`` with exactly one ``done`` (and ``output`` first when the
   call streams), and stops a call on ``cancel``;
4. it exits on ``shutdown`` or when the socket closes.

The supervisor validates every call against the tool's schema and decides it with its
policy before the worker sees it; the worker only does the work. This module runs one
call at a time on a thread of its own so a ``cancel`` is read while a tool works::

    from toolvisor.worker import Tool, Worker, ToolFailure

    def count(args, ctx):
        return f"{len(args['text'].split())} words"

    Worker([Tool("word_count", "Count the words of a text.",
                 {"type": "object", "properties": {"text": {"type": "string"}},
                  "required": ["text"], "additionalProperties": False},
                 count, risk="low", read_only=True)]).run()
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import _msgpack

#: The file descriptor on which toolvisor hands a worker its control socket.
CONTROL_FD = 3


class ToolFailure(Exception):
    """Raise from a tool to end its call with ``status: error`` and this error type."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Cancelled(Exception):
    """Raised by :meth:`CallContext.check` once the supervisor cancelled the call."""


@dataclass
class CallContext:
    """What a tool gets besides its arguments."""

    call: int
    init: Mapping[str, Any]
    _cancelled: threading.Event
    _send: Callable[[Dict[str, Any]], None]
    stream: bool = False

    @property
    def cancelled(self) -> bool:
        """Whether the supervisor asked this call to stop."""
        return self._cancelled.is_set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if the call was cancelled (call it between steps)."""
        if self.cancelled:
            raise Cancelled()

    def output(self, data: str, stream: str = "stdout") -> None:
        """Send a chunk of output now (only when the caller asked for streaming)."""
        if self.stream and data:
            self._send({"type": "output", "call": self.call, "stream": stream, "data": data})


@dataclass
class Tool:
    """One tool a worker serves, as it is announced in ``ready``."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    run: Callable[[Mapping[str, Any], CallContext], str]
    title: Optional[str] = None
    risk: Optional[str] = None
    paths: List[str] = field(default_factory=list)
    read_only: bool = False
    destructive: Optional[bool] = None

    def announcement(self) -> Dict[str, Any]:
        """The tool as the ``ready`` frame carries it."""
        out: Dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
            "annotations": {
                "readOnlyHint": self.read_only,
                "destructiveHint": (not self.read_only) if self.destructive is None else self.destructive,
                "idempotentHint": self.read_only,
                "openWorldHint": False,
            },
        }
        if self.title:
            out["title"] = self.title
        if self.risk:
            out["risk"] = self.risk
        if self.paths:
            out["paths"] = list(self.paths)
        return out


class Worker:
    """Serve ``tools`` on the control socket until the supervisor says stop."""

    def __init__(self, tools: List[Tool]) -> None:
        self.tools = {t.name: t for t in tools}
        self._sock: Optional[socket.socket] = None
        self._send_lock = threading.Lock()
        self._calls: Dict[int, threading.Event] = {}
        self.init: Mapping[str, Any] = {}

    def run(self, fd: int = CONTROL_FD) -> None:
        """Speak the worker protocol on ``fd`` until shutdown or EOF."""
        # The link is this process's alone: a program a tool starts (os.system, an
        # exec) must not inherit it and speak as this worker.
        os.set_inheritable(fd, False)
        self._sock = socket.socket(fileno=fd)
        try:
            first = self._recv()
            if first is None or first.get("type") != "init":
                raise SystemExit("toolvisor worker: expected init first")
            self.init = first
            self._send({
                "type": "ready",
                "pid": os.getpid(),
                "tools": [t.announcement() for t in self.tools.values()],
            })
            while True:
                msg = self._recv()
                if msg is None or msg.get("type") == "shutdown":
                    return
                if msg.get("type") == "run":
                    self._start(msg)
                elif msg.get("type") == "cancel":
                    event = self._calls.get(msg.get("call", -1))
                    if event is not None:
                        event.set()
        finally:
            self._sock.close()

    def announce(self) -> None:
        """Tell the supervisor the tool set changed (after editing :attr:`tools`)."""
        self._send({"type": "tools", "tools": [t.announcement() for t in self.tools.values()]})

    def _start(self, msg: Mapping[str, Any]) -> None:
        call = int(msg["call"])
        cancelled = threading.Event()
        self._calls[call] = cancelled
        ctx = CallContext(call, self.init, cancelled, self._send, bool(msg.get("stream")))
        thread = threading.Thread(
            target=self._serve, args=(msg.get("tool", ""), msg.get("args") or {}, ctx), daemon=True
        )
        thread.start()

    def _serve(self, name: str, args: Mapping[str, Any], ctx: CallContext) -> None:
        tool = self.tools.get(name)
        try:
            if tool is None:
                raise ToolFailure("ToolNotFound", f"this worker has no tool `{name}`")
            content = tool.run(args, ctx)
            outcome = _outcome("ok", content)
        except Cancelled:
            outcome = _outcome("cancelled", "", ("Cancelled", "the call was cancelled"))
        except ToolFailure as e:
            outcome = _outcome("error", "", (e.kind, e.message))
        except Exception as e:  # a tool bug still answers, and the worker lives on
            print(f"toolvisor worker: tool {name} failed: {e!r}", file=sys.stderr)
            outcome = _outcome("error", "", ("InternalError", f"the tool failed: {e}"))
        self._calls.pop(ctx.call, None)
        self._send({"type": "done", "call": ctx.call, "outcome": outcome})

    def _send(self, msg: Dict[str, Any]) -> None:
        body = _msgpack.pack(msg)
        with self._send_lock:
            assert self._sock is not None
            self._sock.sendall(struct.pack(">I", len(body)) + body)

    def _recv(self) -> Optional[Dict[str, Any]]:
        head = self._exactly(4)
        if head is None:
            return None
        (length,) = struct.unpack(">I", head)
        body = self._exactly(length)
        if body is None:
            return None
        msg = _msgpack.unpack(body)
        return msg if isinstance(msg, dict) else {}

    def _exactly(self, n: int) -> Optional[bytes]:
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < n:
            part = self._sock.recv(n - len(buf))
            if not part:
                return None
            buf += part
        return bytes(buf)


def _outcome(status: str, content: str, error: Optional[tuple] = None) -> Dict[str, Any]:
    out: Dict[str, Any] = {"status": status, "content": content, "display": content, "meta": {}}
    if error is not None:
        kind, message = error
        out["error"] = {"type": kind, "message": message}
        out["content"] = out["display"] = f"Error: {message}"
    return out
