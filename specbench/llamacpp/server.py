"""One llama-server for one job: a free port on 127.0.0.1, a health check, its log beside the
job's, and shutdown on every exit path (context exit, interpreter exit, parent death)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 300.0  # loading a GGUF from a cold page cache on a slow disk
REQUEST_TIMEOUT_S = 3600.0


class ServerError(RuntimeError):
    """llama-server died or refused a request; the message names its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when specbench's process dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LlamaServer:
    """`with LlamaServer(binary, args, log_path) as server:` -> server.post(...), server.port."""

    def __init__(self, binary: Path, args: list[str], log_path: Path, threads: int) -> None:
        self.binary, self.args, self.log_path, self.threads = binary, args, log_path, threads
        self.port = 0
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [str(self.binary), "--host", "127.0.0.1", "--port", str(self.port),
                "--threads", str(self.threads), "--threads-batch", str(self.threads),
                *self.args]  # fmt: skip

    def __enter__(self) -> LlamaServer:
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )  # fmt: skip
        atexit.register(self.stop)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Terminate the server (then kill it after 10 s); safe to call twice."""
        proc, self.proc = self.proc, None
        atexit.unregister(self.stop)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _died(self) -> ServerError:
        code = self.proc.poll() if self.proc else None
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        last = lines[-1] if lines else "(empty)"
        return ServerError(f"llama-server exited (code {code}); log {self.log_path}: {last}")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise self._died()
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, _ = self._request("GET", "/health", None, timeout=5)
                if status == 200:
                    return
            time.sleep(0.2)
        raise ServerError(
            f"llama-server not healthy after {START_TIMEOUT_S:.0f} s; log {self.log_path}"
        )

    def _request(self, verb: str, path: str, body: dict | None, timeout: float) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body)
            conn.request(verb, path, data, {"Content-Type": "application/json"})
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read() or b"null")
        finally:
            conn.close()

    def post(self, path: str, body: dict) -> dict:
        """POST a JSON body; the JSON reply, or a ServerError (naming the log if it died)."""
        try:
            status, reply = self._request("POST", path, body, REQUEST_TIMEOUT_S)
        except (OSError, http.client.HTTPException) as err:
            if self.proc is None or self.proc.poll() is not None:
                raise self._died() from err
            raise ServerError(f"llama-server {path}: {err}; log {self.log_path}") from err
        if status != 200:
            raise ServerError(f"llama-server {path}: HTTP {status}: {reply}")
        return reply
