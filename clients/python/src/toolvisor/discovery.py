"""Where the daemon's socket is, computed exactly as the daemon computes it.

Order (docs/PROTOCOL.md §1): an explicit socket path, else ``$TOOLVISOR_SOCKET``, else
``<state_dir>/toolvisor.sock`` — or, when that path is longer than 107 bytes,
``<base>/toolvisor-<h>.sock`` with ``<h>`` the first 16 hex digits of SHA-256 over the
canonical workspace path and ``<base>`` ``$XDG_RUNTIME_DIR`` if it is a directory,
else ``/tmp``. ``state_dir`` is ``server.state_dir`` of the workspace's
``toolvisor.toml`` (relative to the workspace), by default ``.toolvisor``.

Without an explicit workspace, the workspace is the nearest directory, from the
current one upwards, that has a ``toolvisor.toml`` or a ``.toolvisor/`` directory of
this user (the current directory when none has). Whatever the path, the client then
talks only to a daemon of its own user (``SO_PEERCRED``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Mapping, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

#: The longest path a Unix socket address holds.
SUN_PATH_MAX = 107
#: The configuration file the daemon reads by default.
CONFIG_FILE = "toolvisor.toml"
#: The default state directory, relative to the workspace.
DEFAULT_STATE_DIR = ".toolvisor"


def find_workspace(start: Optional[PathLike] = None) -> Path:
    """The nearest ancestor of ``start`` (default: the current directory), itself
    included, with a ``toolvisor.toml`` or a ``.toolvisor/`` directory of this user;
    ``start`` when none has.
    The result is canonical (absolute, symlinks resolved)."""
    here = Path(os.path.realpath(start if start is not None else os.getcwd()))
    for d in (here, *here.parents):
        if (d / CONFIG_FILE).is_file() or _own_dir(d / DEFAULT_STATE_DIR):
            return d
    return here


def _own_dir(path: Path) -> bool:
    """A real directory (not a symlink) of this user: the daemon uses no other as its
    state directory, so one of another user's (``/tmp/.toolvisor``) names no workspace."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def state_dir(workspace: PathLike) -> Path:
    """The workspace's state directory: ``server.state_dir`` of its ``toolvisor.toml``
    (relative to the workspace), default ``<workspace>/.toolvisor``; canonical when it
    exists. A config ``tomllib`` cannot parse (or a Python without ``tomllib``) is
    scanned for a plain ``state_dir = "…"`` line of its ``[server]`` table."""
    ws = Path(workspace)
    configured = _configured_state_dir(ws / CONFIG_FILE)
    d = ws / (configured if configured else DEFAULT_STATE_DIR)
    return Path(os.path.realpath(d)) if d.exists() else d


def default_socket(state: PathLike, workspace: PathLike) -> Path:
    """The socket inside ``state``, or the hashed fallback when that path is too long."""
    inside = Path(state) / "toolvisor.sock"
    if len(os.fsencode(inside)) <= SUN_PATH_MAX:
        return inside
    digest = hashlib.sha256(os.fsencode(Path(workspace))).hexdigest()[:16]
    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.path.isdir(base):
        base = "/tmp"
    return Path(base) / ("toolvisor-%s.sock" % digest)


def socket_path(
    workspace: Optional[PathLike] = None,
    socket: Optional[PathLike] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Path:
    """The socket to connect to: ``socket``, else ``$TOOLVISOR_SOCKET``, else the
    default path of ``workspace`` (found from the current directory when ``None``)."""
    if socket is not None:
        return Path(socket)
    from_env = (os.environ if env is None else env).get("TOOLVISOR_SOCKET")
    if from_env:
        return Path(from_env)
    ws = Path(os.path.realpath(workspace)) if workspace is not None else find_workspace()
    return default_socket(state_dir(ws), ws)


def _configured_state_dir(config: Path) -> Optional[str]:
    """``server.state_dir`` of ``config``, or ``None`` (absent, unreadable, invalid)."""
    try:
        text = config.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - exercised on 3.9/3.10
        return _scan_state_dir(text)
    try:
        server = tomllib.loads(text).get("server")
    except tomllib.TOMLDecodeError:
        return _scan_state_dir(text)
    value = server.get("state_dir") if isinstance(server, dict) else None
    return value if isinstance(value, str) and value else None


def _scan_state_dir(text: str) -> Optional[str]:
    """A line scan for ``state_dir = "…"`` under ``[server]``: enough for the plain
    form the daemon documents, for Pythons without ``tomllib`` and for a config the
    daemon's parser would refuse (the daemon then still serves on its old one)."""
    table = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            table = s[1 : s.find("]")].strip() if "]" in s else None
            continue
        if table != "server" or not s.startswith("state_dir"):
            continue
        key, sep, value = s.partition("=")
        value = value.strip()
        if key.strip() != "state_dir" or not sep or value[:1] not in ('"', "'"):
            continue
        end = value.find(value[0], 1)
        if end > 1:
            return value[1:end]
    return None
