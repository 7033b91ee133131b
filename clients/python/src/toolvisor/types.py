"""Typed views of the server's messages (docs/PROTOCOL.md §3–§7).

Each dataclass is built by ``from_wire`` from a decoded message. Fields the protocol
may add later are ignored by the typed view and kept in ``raw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .errors import CallFailed, ProtocolError, RequestId

#: Every ``status`` a result can have. An unknown one must be treated as a failure.
STATUSES = ("ok", "error", "denied", "timeout", "cancelled", "crashed")


def _opt_int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any, default: str = "") -> str:
    return v if isinstance(v, str) else default


def _map(v: Any) -> Dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


@dataclass
class ErrorInfo:
    """``result.error``: why a call did not end ``ok``."""

    #: The error type (docs/PROTOCOL.md §10), e.g. ``"PolicyDenied"``.
    type: str
    #: A message for the model or a person.
    message: str
    #: With ``WorkerUnavailable``: when to try again.
    retry_after_ms: Optional[int] = None

    @classmethod
    def from_wire(cls, v: Any) -> Optional["ErrorInfo"]:
        """``None`` when ``v`` is absent."""
        if not isinstance(v, Mapping):
            return None
        return cls(_str(v.get("type"), "InternalError"), _str(v.get("message")), _opt_int(v.get("retry_after_ms")))


@dataclass
class Truncation:
    """``result.truncated``: how much output was cut, and where the whole of it is."""

    omitted_bytes: int
    omitted_lines: int
    #: ``run_command`` only: a path ``read_file`` can read (``artifacts:/…`` or relative).
    full_output: Optional[str] = None

    @classmethod
    def from_wire(cls, v: Any) -> Optional["Truncation"]:
        """``None`` when the output was not cut."""
        if not isinstance(v, Mapping):
            return None
        full = v.get("full_output")
        return cls(
            _opt_int(v.get("omitted_bytes")) or 0,
            _opt_int(v.get("omitted_lines")) or 0,
            full if isinstance(full, str) else None,
        )


@dataclass
class Result:
    """The one ``result`` of a call.

    A failed call is a result too: ``status`` is ``error``, ``denied``, ``timeout``,
    ``cancelled`` or ``crashed`` and ``error`` says why. ``content`` is what a model
    should read (on failure ``Error: <message>``, or ``run_command``'s output);
    ``display`` is a short text for a person.
    """

    status: str
    content: str
    display: str
    error: Optional[ErrorInfo]
    meta: Dict[str, Any]
    truncated: Optional[Truncation]
    duration_ms: int
    #: Sequence number of the call's ``completed`` or ``rejected`` audit record.
    audit_seq: Optional[int]
    #: The call's id on its connection.
    id: RequestId = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """Whether the tool did its work (``status == "ok"``)."""
        return self.status == "ok"

    def raise_for_status(self) -> "Result":
        """Return ``self`` if ok, else raise :class:`~toolvisor.CallFailed`."""
        if not self.ok:
            raise CallFailed(self)
        return self

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Result":
        """Parse a ``result`` message."""
        status = msg.get("status")
        if not isinstance(status, str):
            raise ProtocolError("a result without a string status: %r" % (dict(msg),))
        return cls(
            status=status,
            content=_str(msg.get("content")),
            display=_str(msg.get("display")),
            error=ErrorInfo.from_wire(msg.get("error")),
            meta=_map(msg.get("meta")),
            truncated=Truncation.from_wire(msg.get("truncated")),
            duration_ms=_opt_int(msg.get("duration_ms")) or 0,
            audit_seq=_opt_int(msg.get("audit_seq")),
            id=msg.get("id", ""),
            raw=dict(msg),
        )


@dataclass
class Output:
    """A piece of a running call's output (only for calls made with ``stream``)."""

    #: The call's id.
    id: RequestId
    #: ``"stdout"`` or ``"stderr"``.
    stream: str
    data: str

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Output":
        """Parse an ``output`` message."""
        return cls(msg.get("id", ""), _str(msg.get("stream"), "stdout"), _str(msg.get("data")))


@dataclass
class ConfirmRequest:
    """A call that waits for a person's yes or no (``confirm_required``).

    Passed to ``on_confirm``; answer with ``True`` (run it), ``False`` (deny it) or
    ``None`` (leave it to someone else, e.g. ``toolvisor approve``, or to time out).
    """

    #: The asking call's id.
    id: RequestId
    #: The id to answer with (:meth:`Client.confirm`).
    interaction: str
    tool: str
    description: str
    risk: str
    locations: List[str]
    #: The command, or the diff of an edit.
    preview: Optional[str]
    #: How long the question stays open.
    expires_in_ms: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "ConfirmRequest":
        """Parse a ``confirm_required`` message or event."""
        locations = msg.get("locations")
        preview = msg.get("preview")
        return cls(
            id=msg.get("id", ""),
            interaction=_str(msg.get("interaction")),
            tool=_str(msg.get("tool")),
            description=_str(msg.get("description")),
            risk=_str(msg.get("risk")),
            locations=[x for x in locations if isinstance(x, str)] if isinstance(locations, list) else [],
            preview=preview if isinstance(preview, str) else None,
            expires_in_ms=_opt_int(msg.get("expires_in_ms")) or 0,
            raw=dict(msg),
        )


@dataclass
class Event:
    """One ``event`` of a subscription (docs/PROTOCOL.md §7)."""

    #: ``"calls"``, ``"confirmations"`` or ``"workers"``.
    topic: str
    #: e.g. ``"call_started"``, ``"confirm_required"``, ``"worker_exited"``.
    event: str
    #: How many events were lost before this one (the subscriber read too slowly).
    dropped: int
    #: Every field of the message (``id``, ``tool``, ``group``, …).
    fields: Dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the event, or ``default``."""
        return self.fields.get(key, default)

    def confirm_request(self) -> ConfirmRequest:
        """The question of a ``confirm_required`` event."""
        return ConfirmRequest.from_wire(self.fields)

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Event":
        """Parse an ``event`` message."""
        return cls(_str(msg.get("topic")), _str(msg.get("event")), _opt_int(msg.get("dropped")) or 0, dict(msg))


@dataclass
class Welcome:
    """The server's answer to ``hello``."""

    protocol: int
    #: ``"toolvisor/X.Y.Z"``.
    server: str
    #: This connection's session id (audit records carry it).
    session: str
    #: How many tools ``tools()`` lists.
    tools: int

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Welcome":
        """Parse a ``welcome`` message."""
        return cls(
            _opt_int(msg.get("protocol")) or 0,
            _str(msg.get("server")),
            _str(msg.get("session")),
            _opt_int(msg.get("tools")) or 0,
        )


@dataclass
class Token:
    """A grant token (``grant``): pass ``token`` as a call's ``confirm_token``."""

    token: str
    #: RFC 3339 UTC.
    expires_at: str

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Token":
        """Parse a ``token`` message."""
        return cls(_str(msg.get("token")), _str(msg.get("expires_at")))


@dataclass
class WorkerStatus:
    """One worker process in :class:`Status`."""

    group: str
    index: int
    pid: Optional[int]
    #: ``starting``, ``ready``, ``restarting``, ``failed`` or ``stopping``.
    state: str
    restarts: int
    in_flight: int
    rss_bytes: int
    cpu_percent: float

    @classmethod
    def from_wire(cls, v: Mapping[str, Any]) -> "WorkerStatus":
        """Parse one entry of ``status.workers``."""
        cpu = v.get("cpu_percent")
        return cls(
            _str(v.get("group")),
            _opt_int(v.get("index")) or 0,
            _opt_int(v.get("pid")),
            _str(v.get("state")),
            _opt_int(v.get("restarts")) or 0,
            _opt_int(v.get("in_flight")) or 0,
            _opt_int(v.get("rss_bytes")) or 0,
            float(cpu) if isinstance(cpu, (int, float)) else 0.0,
        )


@dataclass
class Status:
    """The daemon's ``status``: workers, audit position, guards, calls in flight."""

    uptime_ms: int
    workers: List[WorkerStatus]
    #: ``{"path": …, "seq": …}``: the audit log and its last record.
    audit: Dict[str, Any]
    #: ``{"landlock", "openat2", "subreaper", "cgroup"}``.
    guards: Dict[str, Any]
    #: Calls in flight, where the daemon reports them.
    calls: List[Dict[str, Any]]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Status":
        """Parse a ``status`` message."""
        workers = msg.get("workers")
        calls = msg.get("calls")
        return cls(
            _opt_int(msg.get("uptime_ms")) or 0,
            [WorkerStatus.from_wire(w) for w in workers if isinstance(w, Mapping)] if isinstance(workers, list) else [],
            _map(msg.get("audit")),
            _map(msg.get("guards")),
            [dict(c) for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else [],
            dict(msg),
        )


@dataclass
class ExplainPart:
    """How one simple command of a ``run_command`` was decided."""

    text: str
    words: List[str]
    decision: str
    rule: Optional[int]
    #: Short names such as ``"command substitution"``.
    hazards: List[str]

    @classmethod
    def from_wire(cls, v: Mapping[str, Any]) -> "ExplainPart":
        """Parse one entry of ``explanation.parts``."""
        words = v.get("words")
        hazards = v.get("hazards")
        return cls(
            _str(v.get("text")),
            [w for w in words if isinstance(w, str)] if isinstance(words, list) else [],
            _str(v.get("decision")),
            _opt_int(v.get("rule")),
            [h for h in hazards if isinstance(h, str)] if isinstance(hazards, list) else [],
        )


@dataclass
class Explanation:
    """What the policy would decide for a call, without running it (``explain``)."""

    #: ``"allow"``, ``"deny"``, ``"ask"``, or ``"error"`` when validation failed.
    decision: str
    risk: str
    reason: str
    #: Index of the deciding rule in file order, from 0.
    rule: Optional[int]
    #: ``run_command``: one entry per simple command.
    parts: List[ExplainPart]
    #: With ``decision == "error"``: why the call is invalid.
    error: Optional[ErrorInfo]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Explanation":
        """Parse an ``explanation`` message."""
        parts = msg.get("parts")
        return cls(
            _str(msg.get("decision")),
            _str(msg.get("risk")),
            _str(msg.get("reason")),
            _opt_int(msg.get("rule")),
            [ExplainPart.from_wire(p) for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else [],
            ErrorInfo.from_wire(msg.get("error")),
            dict(msg),
        )
