"""Python client for toolvisor, the local service that runs tools for LLM agents.

    import toolvisor

    with toolvisor.connect() as tv:                    # the workspace around the cwd
        print(tv.call("read_file", {"path": "README.md"}).content)

:class:`Client` is synchronous (and thread-safe); :class:`AsyncClient` is its asyncio
twin. Both speak protocol v1 over the daemon's Unix socket (docs/PROTOCOL.md) with no
dependency beyond the standard library.
"""

from __future__ import annotations

from .aio import AsyncBatch, AsyncCall, AsyncClient, AsyncSubscription
from .client import Batch, Call, Client, Subscription
from .discovery import find_workspace, socket_path
from .errors import (
    BadEnvelope,
    BadMessage,
    CallFailed,
    ClientClosed,
    ConnectError,
    ConnectionLost,
    DuplicateCallId,
    FrameTooLarge,
    HelloRequired,
    ProtocolError,
    ProtocolVersion,
    RequestTimeout,
    ServerError,
    ToolvisorError,
    UnknownCall,
    UnknownInteraction,
    UnknownMessage,
)
from .types import (
    ConfirmRequest,
    ErrorInfo,
    Event,
    ExplainPart,
    Explanation,
    Output,
    Result,
    Status,
    Token,
    Truncation,
    Welcome,
    WorkerStatus,
)

__version__ = "0.1.0"

#: Connect a synchronous :class:`Client` (see :meth:`Client.connect`).
connect = Client.connect

__all__ = [
    "AsyncBatch",
    "AsyncCall",
    "AsyncClient",
    "AsyncSubscription",
    "BadEnvelope",
    "BadMessage",
    "Batch",
    "Call",
    "CallFailed",
    "Client",
    "ClientClosed",
    "ConfirmRequest",
    "ConnectError",
    "ConnectionLost",
    "DuplicateCallId",
    "ErrorInfo",
    "Event",
    "ExplainPart",
    "Explanation",
    "FrameTooLarge",
    "HelloRequired",
    "Output",
    "ProtocolError",
    "ProtocolVersion",
    "RequestTimeout",
    "Result",
    "ServerError",
    "Status",
    "Subscription",
    "Token",
    "ToolvisorError",
    "Truncation",
    "UnknownCall",
    "UnknownInteraction",
    "UnknownMessage",
    "Welcome",
    "WorkerStatus",
    "connect",
    "find_workspace",
    "socket_path",
]
