#!/usr/bin/env python3
"""How often a coding session is asked: 100 calls a coding agent typically makes (reads,
searches, edits, builds, tests, git, scratch files, a wipe), run non-interactively
against the real daemon on a small project, once per policy setting. Prints how many
calls would have asked a person (`ConfirmationRequired`) per 100.

    scripts/asks-per-100.py            (uses target/release/toolvisor, else target/debug)
    TOOLVISOR_BIN=path scripts/asks-per-100.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))
import toolvisor  # noqa: E402

SETTINGS = {
    "defaults (confined = \"allow\")": "",
    "confined = \"ask\" (the defaults before the confined tier)": "[policy]\nconfined = \"ask\"\n",
}


def binary() -> str:
    if os.environ.get("TOOLVISOR_BIN"):
        return os.environ["TOOLVISOR_BIN"]
    for kind in ("release", "debug"):
        p = ROOT / "target" / kind / "toolvisor"
        if p.exists():
            return str(p)
    sys.exit("build toolvisor first (cargo build --release)")


def project(ws: Path) -> None:
    (ws / "calc").mkdir(parents=True)
    (ws / "tests").mkdir()
    (ws / "calc" / "__init__.py").write_text("from .ops import add, sub\n")
    (ws / "calc" / "ops.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    (ws / "tests" / "test_ops.py").write_text(
        "import unittest\nfrom calc import add, sub\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "    def test_sub(self):\n        self.assertEqual(sub(3, 2), 1)\n"
    )
    (ws / "README.md").write_text("# calc\n\nAdds and subtracts.\n")
    (ws / ".gitignore").write_text("__pycache__/\nbuild/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(git + ["-C", str(ws), "add", "-A"], check=True)
    subprocess.run(git + ["-C", str(ws), "commit", "-qm", "start"], check=True)


def session() -> list:
    """The 100 calls, in the order an agent would make them."""
    reads = [
        ("ls", {"path": "."}), ("read_file", {"path": "README.md"}),
        ("glob", {"pattern": "**/*.py"}), ("read_file", {"path": "calc/ops.py"}),
        ("grep", {"pattern": "def ", "directory": "."}), ("read_file", {"path": "tests/test_ops.py"}),
    ]
    calls = list(reads)
    calls += [("run_command", {"command": "python3 -m unittest -q"}),
              ("run_command", {"command": "git status --short"}),
              ("run_command", {"command": "git log --oneline | head -5"})]
    for i in range(6):
        calls.append(("edit_file", {"path": "calc/ops.py", "edits": [
            {"target": "def sub(a, b):" if i == 0 else f"def f{i - 1}(x):",
             "replacement": f"def f{i}(x):\n    return x * {i}\n\n\n" + ("def sub(a, b):" if i == 0 else f"def f{i - 1}(x):")}]}))
        calls.append(("read_file", {"path": "calc/ops.py"}))
        calls.append(("run_command", {"command": "python3 -m unittest -q 2>&1 | tail -3"}))
        calls.append(("grep", {"pattern": f"f{i}", "directory": "calc"}))
    calls += [("write_file", {"path": f"calc/mod{i}.py", "content": f"X = {i}\n"}) for i in range(5)]
    calls += [("run_command", {"command": c}) for c in [
        "python3 -c 'import calc; print(calc.add(2, 3))'",
        "mkdir -p build && python3 -m compileall -q calc -d build > build/log.txt",
        "sed -i 's/Adds/Adds numbers/' README.md",
        "find . -name '*.py' -not -path './.git/*' | xargs wc -l",
        "rm -rf build __pycache__ calc/__pycache__",
        "git diff --stat",
        "echo scratch > /tmp/notes.txt && cat /tmp/notes.txt",
        "git add -A && git -c user.name=a -c user.email=a@a commit -qm wip && git log --oneline | head -2",
        "ls -la calc",
        "python3 - <<'EOF'\nimport calc\nprint(calc.sub(5, 2))\nEOF",
        "grep -rn TODO . || true",
        "cat calc/ops.py | head -20",
        "touch tests/__init__.py && python3 -m unittest discover -s tests -q",
        "rm -f calc/mod4.py",
        "git stash list",
    ]]
    calls += [("write_todos", {"action": "add", "task": f"step {i}"}) for i in range(3)]
    calls += [("memory", {"action": "set", "key": "style", "value": "small functions"})]
    while len(calls) < 100:
        n = len(calls)
        calls.append(reads[n % len(reads)] if n % 3 else ("run_command", {"command": "git status --short"}))
    return calls[:100]


def run(setting: str, bin_: str) -> tuple:
    base = Path(tempfile.mkdtemp(prefix="asks-", dir=os.environ.get("BENCH_DIR", "/var/tmp")))
    ws = base / "ws"
    project(ws)
    (ws / "toolvisor.toml").write_text(setting)
    log = open(base / "serve.log", "w")
    daemon = subprocess.Popen([bin_, "--workspace", str(ws), "serve"], stderr=log, stdout=log)
    try:
        deadline = time.time() + 60
        # `doctor` waits for the guard canary (the confined tier needs its verdict);
        # it prints JSON only once it has talked to the daemon.
        while not subprocess.run([bin_, "--workspace", str(ws), "doctor", "--json"],
                                 capture_output=True, text=True).stdout.strip().startswith("{"):
            if time.time() > deadline:
                sys.exit(f"serve did not start: {(base / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.2)
        asked, ran, other = 0, 0, {}
        with toolvisor.connect(workspace=str(ws), client="asks-per-100") as tv:
            for tool, args in session():
                r = tv.call(tool, args)
                if r.error is not None and r.error.type == "ConfirmationRequired":
                    asked += 1
                elif r.status == "ok" or r.error.type == "ShellExecutionError":
                    ran += 1
                else:
                    other[r.error.type] = other.get(r.error.type, 0) + 1
        return asked, ran, other
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    bin_ = binary()
    print(f"binary: {bin_}\n")
    print("| policy | asked | ran | other |\n|---|---|---|---|")
    for name, setting in SETTINGS.items():
        asked, ran, other = run(setting, bin_)
        print(f"| {name} | {asked} | {ran} | {json.dumps(other) if other else '-'} |")


if __name__ == "__main__":
    main()
