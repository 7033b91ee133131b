"""Finding the workspace and the socket as the daemon computes them, including the
long-path fallback, checked against a real daemon serving from a deep directory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import toolvisor
from toolvisor import discovery

from conftest import Daemon


def test_the_nearest_ancestor_with_a_config_or_a_state_dir(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    inner = outer / "a" / "inner"
    (inner / "b" / "c").mkdir(parents=True)
    (outer / "toolvisor.toml").write_text("")
    assert discovery.find_workspace(inner / "b" / "c") == outer.resolve()
    (inner / ".toolvisor").mkdir()
    assert discovery.find_workspace(inner / "b" / "c") == inner.resolve()
    assert discovery.find_workspace(inner) == inner.resolve()
    lone = tmp_path / "lone"
    lone.mkdir()
    assert discovery.find_workspace(lone) == lone.resolve()


def test_a_file_named_like_the_state_dir_does_not_count(tmp_path: Path) -> None:
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / ".toolvisor").write_text("a file")
    assert discovery.find_workspace(tmp_path / "x" / "y") == (tmp_path / "x" / "y").resolve()


def test_a_state_dir_of_another_user_or_a_symlink_names_no_workspace(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "proj" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (shared / ".toolvisor").symlink_to(tmp_path / "elsewhere")
    assert discovery.find_workspace(shared / "proj" / "sub") == (shared / "proj" / "sub").resolve()
    if os.getuid() != 0:
        return  # giving a directory away needs root; the symlink case above still ran
    (shared / ".toolvisor").unlink()
    (shared / ".toolvisor").mkdir()
    os.chown(shared / ".toolvisor", 65534, 65534)  # a planted /tmp/.toolvisor, say
    assert discovery.find_workspace(shared / "proj" / "sub") == (shared / "proj" / "sub").resolve()
    os.chown(shared / ".toolvisor", os.getuid(), os.getgid())
    assert discovery.find_workspace(shared / "proj" / "sub") == shared.resolve()


def test_symlinked_workspaces_resolve_to_the_real_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "toolvisor.toml").write_text("")
    link = tmp_path / "link"
    link.symlink_to(real)
    assert discovery.socket_path(workspace=link, env={}) == real.resolve() / ".toolvisor" / "toolvisor.sock"


def test_the_order_argument_environment_workspace(tmp_path: Path) -> None:
    assert discovery.socket_path(tmp_path, socket="/x.sock", env={"TOOLVISOR_SOCKET": "/y.sock"}) == Path("/x.sock")
    assert discovery.socket_path(tmp_path, env={"TOOLVISOR_SOCKET": "/y.sock"}) == Path("/y.sock")
    assert (
        discovery.socket_path(tmp_path, env={"TOOLVISOR_SOCKET": ""})
        == tmp_path.resolve() / ".toolvisor" / "toolvisor.sock"
    )


def test_state_dir_from_the_config(tmp_path: Path) -> None:
    (tmp_path / "toolvisor.toml").write_text('[server]\nstate_dir = "var/tv"  # here\n')
    assert discovery.state_dir(tmp_path) == tmp_path / "var" / "tv"
    (tmp_path / "toolvisor.toml").write_text("[server]\nstate_dir = '/abs/state'\n")
    assert discovery.state_dir(tmp_path) == Path("/abs/state")
    # A config the daemon would refuse still names its state directory.
    (tmp_path / "toolvisor.toml").write_text(
        '[policy]\nmode = "autoo"\n[server\n[server]\nstate_dir = "kept"\nx = = 1\n'
    )
    assert discovery.state_dir(tmp_path) == tmp_path / "kept"
    (tmp_path / "toolvisor.toml").write_text('[other]\nstate_dir = "not-this"\n[[policy.rules]]\ntool = "x"\n')
    assert discovery.state_dir(tmp_path) == tmp_path / ".toolvisor"


def test_the_line_scanner_alone(tmp_path: Path) -> None:
    scan = discovery._scan_state_dir
    assert scan('[server]\nstate_dir="s"\n') == "s"
    assert scan("[server] # c\n  state_dir = 'q'\n") == "q"
    assert scan('[server]\nstate_dirx = "no"\n') is None
    assert scan('state_dir = "top-level"\n') is None
    assert scan('[server]\nstate_dir = ""\n') is None


def test_long_paths_fall_back_to_the_runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Path("/w") / ("d" * 120)
    digest = hashlib.sha256(os.fsencode(ws)).hexdigest()[:16]
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert discovery.default_socket(ws / ".toolvisor", ws) == tmp_path / ("toolvisor-%s.sock" % digest)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert discovery.default_socket(ws / ".toolvisor", ws) == Path("/tmp/toolvisor-%s.sock" % digest)
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert discovery.default_socket(ws / ".toolvisor", ws).parent == Path("/tmp")
    short = Path("/w/s")
    assert discovery.default_socket(short / ".toolvisor", short) == short / ".toolvisor" / "toolvisor.sock"
    # 107 bytes exactly still fits.
    edge = Path("/" + "e" * (107 - len("/.toolvisor/toolvisor.sock") - 1))
    assert len(str(edge / ".toolvisor" / "toolvisor.sock")) == 107
    assert discovery.default_socket(edge / ".toolvisor", edge) == edge / ".toolvisor" / "toolvisor.sock"


def test_a_real_daemon_on_a_long_path_is_found_from_a_subdirectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    ws = tmp_path / ("long-" + "w" * 60) / ("deeper-" + "x" * 40)
    d = Daemon(ws, env={"XDG_RUNTIME_DIR": str(runtime)}).start()
    try:
        assert d.socket.parent == runtime  # too long for the state dir: in the runtime dir
        assert not (ws / ".toolvisor" / "toolvisor.sock").exists()
        (ws / "sub").mkdir()
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        monkeypatch.delenv("TOOLVISOR_SOCKET", raising=False)
        monkeypatch.chdir(ws / "sub")
        with toolvisor.connect() as tv:
            assert tv.socket_path.parent == runtime
            assert tv.call("ls", {"path": "."}).content == "sub/"  # the config is hidden
    finally:
        d.stop()
