"""Start llama-cpp-python's OpenAI-compatible server on this machine, for tests, benchmarks
and programs testing their own pools."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ..errors import ServerStartError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class LocalServer:
    """One ``python -m llama_cpp.server`` process on 127.0.0.1 (the ``server`` extra of
    llama-cpp-python), in its own process group.

    Args:
        model: the GGUF file.
        port: TCP port (default: a free one).
        n_ctx, n_threads: passed as ``--n_ctx`` and ``--n_threads``.
        log: file that receives the server's stdout and stderr (default: discarded).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        port: int | None = None,
        n_ctx: int = 2048,
        n_threads: int = 1,
        log: Path | None = None,
    ) -> None:
        self.model, self.n_ctx, self.n_threads, self.log = Path(model), n_ctx, n_threads, log
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> LocalServer:
        """Start the process and wait until ``GET /v1/models`` answers; ServerStartError when it
        exited, or did not answer within ``timeout_s`` (then stopped)."""
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    str(self.model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--n_ctx",
                    str(self.n_ctx),
                    "--n_threads",
                    str(self.n_threads),
                    "--n_threads_batch",
                    str(self.n_threads),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if self.log:
                out.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"llama_cpp.server on port {self.port} exited with "
                    f"status {self.process.returncode}"
                )
            try:
                if httpx.get(self.url + "/v1/models", timeout=2.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise ServerStartError(
            f"llama_cpp.server on port {self.port} did not answer in {timeout_s:g} s"
        )

    def kill(self) -> None:
        """SIGKILL the process (a crash), and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; callable many times."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> LocalServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
