"""What the sync and the asyncio clients share, with no I/O of its own.

- framing (docs/PROTOCOL.md §2): a 4-byte big-endian length, then one MessagePack map
  with a string ``type``;
- the messages a client sends, built from keyword arguments;
- the :class:`Router`, which hands each incoming message to whoever waits for it (by
  request id; ``confirmed`` and id-less errors by order, since ``confirm`` has no id;
  events to the subscription), so any number of requests share one connection;
- what both clients are made of besides I/O: their :class:`Settings`, the retry pauses
  of a reconnect, the sticky end of a mailbox, the state of a call handle;
- :class:`Progress`, which follows one call or one batch through its ``output``,
  ``confirm_required``, ``result`` and ``batch_done`` messages.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import struct
import threading
import time
from pathlib import Path
from collections import deque
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    FrozenSet,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _msgpack, discovery
from .errors import ConnectError, ConnectionLost, ProtocolError, RequestId, RequestTimeout, ServerError
from .types import ConfirmRequest, Output, Result

log = logging.getLogger("toolvisor")

#: The protocol version this package speaks.
PROTOCOL = 1
#: The largest frame this client accepts from the server (the server's own limit for
#: incoming frames is ``limits.max_frame_bytes``, 8 MiB by default).
MAX_INCOMING_FRAME = 64 << 20
#: Client name sent in ``hello`` unless the caller gives one.
DEFAULT_CLIENT = "toolvisor-python"
#: The topics ``subscribe`` knows.
TOPICS = ("calls", "confirmations", "workers")

#: A point in time.monotonic(), or ``None`` for "wait for ever".
Deadline = Optional[float]

#: What ``stream=`` accepts: ``True`` (output via the call's iterator), or a callback.
StreamArg = Union[None, bool, Callable[[Output], Any]]
#: ``on_confirm(request)``: ``True`` approve, ``False`` deny, ``None`` leave unanswered.
OnConfirm = Callable[[ConfirmRequest], Any]

# ------------------------------------------------------------------------- framing


def encode_frame(msg: Mapping[str, Any]) -> bytes:
    """One frame: the length prefix and the MessagePack body of ``msg``."""
    body = _msgpack.pack(msg)
    return len(body).to_bytes(4, "big") + body


def frame_length(head: bytes) -> int:
    """The body length a 4-byte prefix announces; refuse absurd sizes."""
    n = int.from_bytes(head, "big")
    if n > MAX_INCOMING_FRAME:
        raise ProtocolError(
            "the server announced a frame of %d bytes (this client takes at most %d)" % (n, MAX_INCOMING_FRAME)
        )
    return n


def decode_message(body: bytes) -> Dict[str, Any]:
    """Decode one frame body into a message: a map with a string ``type``."""
    try:
        msg = _msgpack.unpack(body)
    except _msgpack.CodecError as e:
        raise ProtocolError("the server sent a frame that does not decode: %s" % e) from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError("the server sent something that is not a message: %r" % (msg,))
    return msg


# ------------------------------------------------------------------------- messages


def _optional(msg: Dict[str, Any], **fields: Any) -> Dict[str, Any]:
    for key, value in fields.items():
        if value is not None:
            msg[key] = value
    return msg


def hello_message(client: str, interactive: bool) -> Dict[str, Any]:
    """``hello``: the first message of every connection."""
    return {"type": "hello", "protocol": PROTOCOL, "client": client, "interactive": bool(interactive)}


def call_fields(
    rid: RequestId,
    tool: str,
    args: Optional[Mapping[str, Any]],
    timeout_ms: Optional[int],
    trace_id: Optional[str],
    confirm_token: Optional[str],
    stream: StreamArg,
) -> Dict[str, Any]:
    """The fields of one call (``call`` without its ``type``, as a batch lists them)."""
    if not isinstance(tool, str):
        raise TypeError("tool must be a string, not %s" % type(tool).__name__)
    if args is not None and not isinstance(args, Mapping):
        raise TypeError("args must be a mapping (a JSON object), not %s" % type(args).__name__)
    return _optional(
        {"id": rid, "tool": tool, "args": dict(args or {})},
        trace_id=trace_id,
        timeout_ms=timeout_ms,
        stream=None if stream is None else bool(stream),
        confirm_token=confirm_token,
    )


def batch_calls(
    new_id: Callable[[], str], calls: Iterable[Union[Mapping[str, Any], Sequence[Any]]], stream: StreamArg
) -> List[Dict[str, Any]]:
    """The ``calls`` of a ``batch``, each with a fresh id.

    Each entry is ``(tool, args)`` or a mapping with ``tool``, ``args`` and optionally
    ``timeout_ms``, ``trace_id``, ``confirm_token``, ``stream``.
    """
    out = []
    for spec in calls:
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"tool", "args", "timeout_ms", "trace_id", "confirm_token", "stream"}
            if unknown:
                raise TypeError("unknown batch call keys: %s" % ", ".join(sorted(unknown)))
            own_stream = spec.get("stream", stream)
            out.append(
                call_fields(
                    new_id(),
                    spec.get("tool"),  # type: ignore[arg-type]
                    spec.get("args"),
                    spec.get("timeout_ms"),
                    spec.get("trace_id"),
                    spec.get("confirm_token"),
                    own_stream,
                )
            )
        else:
            tool, args = spec
            out.append(call_fields(new_id(), tool, args, None, None, None, stream))
    if not out:
        raise ValueError("a batch needs at least one call")
    return out


def ping_message(rid: RequestId) -> Dict[str, Any]:
    """``ping``."""
    return {"type": "ping", "id": rid}


def status_message(rid: RequestId) -> Dict[str, Any]:
    """``status``."""
    return {"type": "status", "id": rid}


def restart_message(rid: RequestId, group: Optional[str]) -> Dict[str, Any]:
    """``restart`` of every group, or of one."""
    return _optional({"type": "restart", "id": rid}, group=group)


def explain_message(rid: RequestId, tool: str, args: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``explain``: the policy's decision for a call, without running it."""
    if args is not None and not isinstance(args, Mapping):
        raise TypeError("args must be a mapping (a JSON object), not %s" % type(args).__name__)
    return {"type": "explain", "id": rid, "tool": tool, "args": dict(args or {})}


def confirm_message(interaction: str, approve: bool, remember: str) -> Dict[str, Any]:
    """``confirm``: answer a ``confirm_required``."""
    if remember not in ("once", "session"):
        raise ValueError("remember must be 'once' or 'session', not %r" % (remember,))
    return {"type": "confirm", "interaction": interaction, "approve": bool(approve), "remember": remember}


def grant_message(
    rid: RequestId,
    tools: Sequence[str],
    ttl_ms: int,
    trace_id: Optional[str],
    paths: Optional[Sequence[str]],
    reusable: bool,
) -> Dict[str, Any]:
    """``grant``: ask for a token that lets matching calls pass an ``ask``."""
    if isinstance(tools, str):
        tools = [tools]
    return _optional(
        {"type": "grant", "id": rid, "tools": list(tools), "ttl_ms": ttl_ms, "reusable": bool(reusable)},
        trace_id=trace_id,
        paths=None if paths is None else list(paths),
    )


def subscribe_message(rid: RequestId, topics: Union[str, Sequence[str]]) -> Dict[str, Any]:
    """``subscribe``: events of the given topics, until the connection closes."""
    topics = [topics] if isinstance(topics, str) else list(topics)
    bad = [t for t in topics if t not in TOPICS]
    if bad or not topics:
        raise ValueError("topics must be some of %s, not %r" % (", ".join(TOPICS), topics))
    return {"type": "subscribe", "id": rid, "topics": topics}


def tools_message(rid: RequestId, format: str, groups: Optional[Sequence[str]]) -> Dict[str, Any]:
    """``list_tools`` in one of the three formats."""
    if format not in ("native", "openai", "mcp"):
        raise ValueError("format must be 'native', 'openai' or 'mcp', not %r" % (format,))
    return _optional(
        {"type": "list_tools", "id": rid, "format": format}, groups=None if groups is None else list(groups)
    )


def expect_answer(msg: Mapping[str, Any], answer: str) -> Dict[str, Any]:
    """The answer ``msg`` must be (of type ``answer``), or raise its error."""
    if msg.get("type") == "error":
        raise ServerError.from_wire(msg)
    if msg.get("type") != answer:
        raise ProtocolError("expected %r, got %r" % (answer, dict(msg)))
    return dict(msg)


# ------------------------------------------------------------------------- routing


class IdSource:
    """Request ids, unique for a client's whole life: a request sent again on a new
    connection never meets an id of the old one."""

    def __init__(self) -> None:
        self._n = itertools.count(1)
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            return "py%d" % next(self._n)


class Sink:
    """Where the router puts the messages of one waiter (a queue, sync or asyncio)."""

    def put(self, msg: Dict[str, Any]) -> None:  # pragma: no cover - interface
        """Deliver a message."""
        raise NotImplementedError

    def fail(self, exc: BaseException) -> None:  # pragma: no cover - interface
        """Deliver the end of the connection."""
        raise NotImplementedError


class Discard(Sink):
    """A sink for answers nobody reads (the ``confirmed`` of an ``on_confirm`` answer)."""

    def put(self, msg: Dict[str, Any]) -> None:
        if msg.get("type") == "error":
            log.debug("toolvisor: answer to a confirmation refused: %s", msg.get("error"))

    def fail(self, exc: BaseException) -> None:
        pass


#: Message types that end a call's, a batch's or any other request's conversation.
CALL_END: FrozenSet[str] = frozenset(("result", "error"))
BATCH_END: FrozenSet[str] = frozenset(("batch_done", "error"))
ANY: Optional[FrozenSet[str]] = None

#: Connection-level errors after which the server closes the connection.
_FATAL = ("FrameTooLarge", "ProtocolVersion")


def _key(rid: Any) -> Tuple[bool, Any]:
    # Integer 7 and string "7" are different ids.
    return (isinstance(rid, int) and not isinstance(rid, bool), rid)


class Router:
    """Who waits for what on one connection. Thread-safe; never runs user code."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: Dict[Tuple[bool, Any], Tuple[Sink, Optional[FrozenSet[str]]]] = {}
        self._confirms: Deque[Sink] = deque()
        self._events: Optional[Sink] = None
        self._ended: Optional[BaseException] = None
        #: A fatal id-less error the server sent before closing (FrameTooLarge, …).
        self.fatal: Optional[ServerError] = None

    def expect(self, sink: Sink, ids: Iterable[Tuple[RequestId, Optional[FrozenSet[str]]]]) -> None:
        """Route messages carrying each id to ``sink`` until one of its end types."""
        with self._lock:
            self._check_open()
            for rid, end in ids:
                self._waiting[_key(rid)] = (sink, end)

    def expect_confirm(self, sink: Sink) -> None:
        """Route the answer to the next ``confirm`` sent to ``sink`` (by order)."""
        with self._lock:
            self._check_open()
            self._confirms.append(sink)

    def expect_events(self, sink: Sink) -> None:
        """Route every ``event`` to ``sink``."""
        with self._lock:
            self._check_open()
            self._events = sink

    def forget(self, ids: Iterable[RequestId]) -> None:
        """Stop routing these ids (a waiter that gave up)."""
        with self._lock:
            for rid in ids:
                self._waiting.pop(_key(rid), None)

    def waiting(self, rid: RequestId) -> bool:
        """Whether messages for ``rid`` are still awaited."""
        with self._lock:
            return _key(rid) in self._waiting

    def forget_confirm(self, sink: Sink) -> None:
        """Undo :meth:`expect_confirm` when the ``confirm`` could not be sent."""
        with self._lock:
            try:
                self._confirms.remove(sink)
            except ValueError:
                pass

    def dispatch(self, msg: Dict[str, Any]) -> None:
        """Hand ``msg`` to whoever waits for it; drop it if nobody does."""
        sink = self._sink_for(msg)
        if sink is None:
            log.debug("toolvisor: nobody waits for %s %r", msg.get("type"), msg.get("id"))
        else:
            sink.put(msg)

    def _sink_for(self, msg: Dict[str, Any]) -> Optional[Sink]:
        kind = msg["type"]
        with self._lock:
            if kind == "event":
                return self._events
            rid = msg.get("id")
            if kind == "confirmed" or (kind == "error" and rid is None):
                err = msg.get("error")
                if kind == "error" and isinstance(err, Mapping) and err.get("type") in _FATAL:
                    self.fatal = ServerError.from_wire(msg)
                    return None
                return self._confirms.popleft() if self._confirms else None
            entry = self._waiting.get(_key(rid))
            if entry is None:
                return None
            sink, end = entry
            if end is None or kind in end:
                del self._waiting[_key(rid)]
            return sink

    def end(self, exc: BaseException) -> None:
        """The connection ended: every waiter gets ``exc`` (the server's reason if it
        gave one), and nothing can be expected any more."""
        with self._lock:
            if self._ended is not None:
                return
            self._ended = self.fatal or exc
            sinks = {id(s): s for s, _ in self._waiting.values()}
            sinks.update((id(s), s) for s in self._confirms)
            if self._events is not None:
                sinks[id(self._events)] = self._events
            self._waiting.clear()
            self._confirms.clear()
            self._events = None
            reason = self._ended
        for sink in sinks.values():
            sink.fail(reason)

    @property
    def ended(self) -> Optional[BaseException]:
        """Why the connection ended, or ``None`` while it is open."""
        return self._ended

    def _check_open(self) -> None:
        if self._ended is not None:
            raise ConnectionLost("the connection has ended: %s" % self._ended)


# ------------------------------------------------------------------------- clients


def deadline(timeout: Optional[float]) -> Deadline:
    """The moment ``timeout`` seconds from now (``None`` stays ``None``)."""
    return None if timeout is None else time.monotonic() + timeout


def connect_failure(path: Path, e: OSError) -> ConnectError:
    """The :class:`ConnectError` for a failed ``connect`` to ``path``, saying why."""
    if isinstance(e, FileNotFoundError):
        why = "no toolvisor daemon: %s does not exist (start one with `toolvisor serve`)" % path
    elif isinstance(e, ConnectionRefusedError):
        why = "no toolvisor daemon listens on %s (it stopped; start it again)" % path
    else:
        why = "cannot connect to %s: %s" % (path, e)
    return ConnectError(why, str(path))


def check_peer(sock: socket.socket, path: Path) -> None:
    """Refuse a socket served by another user (``SO_PEERCRED``, where the OS has it).

    The daemon serves only its own user and refuses everyone else; the client holds
    the other end to the same rule, so a socket someone else planted where a
    workspace's socket is looked for (a ``/tmp/.toolvisor/``, say) never sees a call's
    arguments nor answers one."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # pragma: no cover - not Linux
        return
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    if uid != os.getuid():
        raise ConnectError(
            "%s is served by uid %d, not by this user (uid %d); refusing it" % (path, uid, os.getuid()), str(path)
        )


def retry_pauses(wait: float) -> Iterator[Optional[float]]:
    """The pauses between tries to reach a restarting daemon, growing from 20 ms to
    250 ms while ``wait`` seconds last, then ``None``: the last try's error stands.
    (A restarting daemon sends no signal a client could wait on.)"""
    end = time.monotonic() + wait
    pause = 0.02
    while time.monotonic() + pause <= end:
        yield pause
        pause = min(pause * 2, 0.25)
    yield None


class Settings:
    """What a client is made with (the sync and the asyncio client share it)."""

    def __init__(
        self,
        workspace: Optional[discovery.PathLike],
        socket: Optional[discovery.PathLike],
        client: str,
        interactive: bool,
        timeout: Optional[float],
        reconnect_timeout: float,
    ) -> None:
        #: The socket this client connects to (see :mod:`toolvisor.discovery`).
        self.socket_path = discovery.socket_path(workspace, socket)
        #: The name sent in ``hello`` (logs and audit records show it).
        self.client_name = client
        #: Whether the daemon may ask this client to confirm calls.
        self.interactive = interactive
        #: Longest wait for an answer other than a call's result (``None``: no limit).
        self.timeout = timeout
        #: How long a new request keeps trying to reach a restarting daemon.
        self.reconnect_timeout = reconnect_timeout
        self._new_id = IdSource()
        self._closed = False


class MailboxBase(Sink):
    """One waiter's messages; the connection's end, once seen, is raised again."""

    _ended: Optional[BaseException] = None

    def _check_ended(self) -> None:
        if self._ended is not None:
            raise self._ended

    def _unwrap(self, item: Tuple[bool, Any]) -> Dict[str, Any]:
        ok, value = item
        if not ok:
            self._ended = value
            raise value
        msg: Dict[str, Any] = value
        return msg

    @staticmethod
    def _timed_out() -> RequestTimeout:
        return RequestTimeout("no answer from the daemon in time")


class ConversationBase:
    """What the call and batch handles of both clients hold (no I/O)."""

    def __init__(
        self, conn: Any, box: Any, progress: "Progress", stream: StreamArg, on_confirm: Optional[OnConfirm]
    ) -> None:
        self._conn = conn
        self._box = box
        self._progress = progress
        self._on_output = stream if callable(stream) else None
        self._on_confirm = on_confirm

    @property
    def done(self) -> bool:
        """Whether the end (the result, or ``batch_done``) has arrived."""
        return self._progress.done

    def _target(self) -> RequestId:
        """The id a ``cancel`` names: the batch's, or the call's."""
        return self._progress.batch_id if self._progress.batch_id is not None else self._progress.ids[0]

    def _cancel_frame(self) -> Optional[bytes]:
        """The ``cancel`` to send, or ``None`` when there is nothing left to cancel."""
        if self._progress.done or not self._conn.alive:
            return None
        return encode_frame({"type": "cancel", "id": self._target()})

    def _confirm_frame(self, request: ConfirmRequest, approve: bool) -> bytes:
        return encode_frame(confirm_message(request.interaction, approve, "once"))


# ------------------------------------------------------------------------- calls


class Progress:
    """Follows one call (``batch_id`` is ``None``) or one batch to its end."""

    def __init__(self, ids: Sequence[RequestId], batch_id: Optional[RequestId] = None) -> None:
        self.ids = list(ids)
        self.batch_id = batch_id
        self.results: Dict[Tuple[bool, Any], Result] = {}
        self.done = False
        #: The connection-level error that ended the conversation, if one did.
        self.error: Optional[ServerError] = None

    def routes(self) -> List[Tuple[RequestId, Optional[FrozenSet[str]]]]:
        """The router registrations this conversation needs."""
        routes: List[Tuple[RequestId, Optional[FrozenSet[str]]]] = [(rid, CALL_END) for rid in self.ids]
        if self.batch_id is not None:
            routes.append((self.batch_id, BATCH_END))
        return routes

    def open_ids(self) -> List[RequestId]:
        """The ids that still await their end."""
        return [rid for rid in self.ids if _key(rid) not in self.results] + (
            [] if self.batch_id is None or self.done else [self.batch_id]
        )

    def feed(self, msg: Dict[str, Any]) -> Tuple[str, Any]:
        """Classify one message: ``("output", Output)``, ``("confirm", ConfirmRequest)``,
        ``("result", Result)``, ``("done", None)``, or ``("ignore", None)``. A
        connection-level error about the conversation raises its :class:`ServerError`."""
        kind = msg["type"]
        if kind == "output":
            return "output", Output.from_wire(msg)
        if kind == "confirm_required":
            return "confirm", ConfirmRequest.from_wire(msg)
        if kind == "result":
            result = Result.from_wire(msg)
            self.results[_key(result.id)] = result
            if self.batch_id is None:
                self.done = True
            return "result", result
        if kind == "batch_done" and self.batch_id is not None:
            self.done = True
            return "done", None
        if kind == "error":
            self.done = True
            self.error = ServerError.from_wire(msg)
            raise self.error
        return "ignore", None

    def ordered(self) -> List[Result]:
        """The results in request order (every call of a finished batch has one)."""
        if self.error is not None:
            raise self.error
        missing = [rid for rid in self.ids if _key(rid) not in self.results]
        if missing:
            raise ProtocolError("the batch ended without results for %r" % missing)
        return [self.results[_key(rid)] for rid in self.ids]

    def single(self) -> Result:
        """The result of a single call (or the error that refused it)."""
        if self.error is not None:
            raise self.error
        return self.results[_key(self.ids[0])]


def confirm_answer(value: Any) -> Optional[bool]:
    """What an ``on_confirm`` return value means: approve, deny, or no answer."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    raise TypeError("on_confirm must return True, False or None, not %r" % (value,))
