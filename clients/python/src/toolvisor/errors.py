"""Exceptions: connection-level failures only.

A tool call that fails is not an exception: it is a :class:`~toolvisor.Result` whose
``status`` is not ``"ok"`` (a model should read its ``content``). Exceptions are for
what stops the conversation itself: no daemon, a lost connection, a protocol
violation, a connection-level ``error`` message from the server, or a wait that passed
its deadline. Every one of them is a :class:`ToolvisorError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Type, Union

if TYPE_CHECKING:  # pragma: no cover
    from .types import Result

#: A request id as the protocol carries it: a string, or an integer (echoed as sent).
RequestId = Union[str, int]


class ToolvisorError(Exception):
    """Base class of every exception this package raises on purpose."""


class ConnectError(ToolvisorError):
    """The daemon could not be reached: no socket, nobody listening, not a socket."""

    def __init__(self, message: str, socket: Optional[str] = None) -> None:
        super().__init__(message)
        #: The socket path that was tried.
        self.socket = socket


class ConnectionLost(ToolvisorError):
    """The connection ended while an answer was awaited (daemon stopped or restarted).

    Calls that were running when it ended have no result on this side; the daemon
    cancels the calls of a connection that closes. The next *new* request of the
    client connects again.
    """


class ClientClosed(ConnectionLost):
    """The client was closed by its owner; it makes no new connection."""


class ProtocolError(ToolvisorError):
    """The server sent something protocol v1 does not allow (bad frame, bad message)."""


class RequestTimeout(ToolvisorError, TimeoutError):
    """An answer did not arrive within the time the caller allowed."""


class CallFailed(ToolvisorError):
    """Raised by :meth:`Result.raise_for_status` for a result whose status is not ok."""

    def __init__(self, result: "Result") -> None:
        err = result.error
        what = "%s: %s" % (err.type, err.message) if err else result.status
        super().__init__("call %r ended %s (%s)" % (result.id, result.status, what))
        #: The failed result.
        self.result = result


class ServerError(ToolvisorError):
    """A connection-level ``error`` message (docs/PROTOCOL.md §8).

    The subclass is named after ``error.type`` (``BadMessage``, ``UnknownMessage``, …);
    a type this package does not know gives a plain ``ServerError``.
    """

    def __init__(
        self, type: str, message: str, id: Optional[RequestId] = None, raw: Optional[Dict[str, Any]] = None
    ) -> None:
        super().__init__("%s: %s" % (type, message))
        #: ``error.type`` as the server sent it.
        self.type = type
        #: ``error.message``.
        self.message = message
        #: The request id the error echoes, if any.
        self.id = id
        #: The whole message.
        self.raw = raw or {}

    @staticmethod
    def from_wire(msg: Mapping[str, Any]) -> "ServerError":
        """Build the right subclass from a ``{type:"error", id?, error:{type, message}}``."""
        body = msg.get("error")
        body = body if isinstance(body, Mapping) else {}
        kind = str(body.get("type", "ServerError"))
        cls = _BY_TYPE.get(kind, ServerError)
        return cls(kind, str(body.get("message", "")), msg.get("id"), dict(msg))


class BadMessage(ServerError):
    """The server could not use a request: malformed, or a field missing or ill-typed."""


class UnknownMessage(ServerError):
    """The server does not know the request's ``type`` (an older daemon, say)."""


class FrameTooLarge(ServerError, ConnectionLost):
    """A frame passed the server's ``max_frame_bytes``; the server closed the connection."""


class HelloRequired(ServerError):
    """A request came before ``hello`` (this client always says hello first)."""


class ProtocolVersion(ServerError, ConnectionLost):
    """The server speaks another protocol version; it closed the connection."""


class DuplicateCallId(ServerError):
    """A call id that is still open on the connection was used again."""


class UnknownCall(ServerError):
    """``cancel`` of an id that is not an open call or batch of the connection."""


class UnknownInteraction(ServerError):
    """``confirm`` of an interaction that is unknown, already answered, or expired."""


class BadEnvelope(ServerError):
    """An envelope (a model's fenced action block) could not be used."""


_BY_TYPE: Dict[str, Type[ServerError]] = {
    c.__name__: c
    for c in (
        BadMessage,
        UnknownMessage,
        FrameTooLarge,
        HelloRequired,
        ProtocolVersion,
        DuplicateCallId,
        UnknownCall,
        UnknownInteraction,
        BadEnvelope,
    )
}
