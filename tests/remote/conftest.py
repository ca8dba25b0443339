"""Real llama-cpp-python servers (``python -m llama_cpp.server``) on 127.0.0.1 for the
pool tests: started on free ports with the test model, one thread each, and stopped
by finalizers whatever happens (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import pytest

from llamabatch.testing.servers import LocalServer


@pytest.fixture
def start_servers(model_path, tmp_path, request):
    """``start_servers(n)`` starts ``n`` servers (logs in tmp_path) and returns them."""

    def start(n: int) -> list[LocalServer]:
        servers = []
        for k in range(n):
            server = LocalServer(
                model_path, n_ctx=2048, n_threads=1, log=tmp_path / f"server-{len(servers)}-{k}.log"
            )
            request.addfinalizer(server.stop)
            servers.append(server.start(timeout_s=120))
        return servers

    return start


@pytest.fixture(scope="module")
def two_servers(model_path, tmp_path_factory):
    """Two servers shared by a module's tests (none of which kills them)."""
    logs = tmp_path_factory.mktemp("servers")
    servers = [
        LocalServer(model_path, n_ctx=2048, n_threads=1, log=logs / f"server-{k}.log")
        for k in range(2)
    ]
    try:
        for server in servers:
            server.start(timeout_s=120)
        yield servers
    finally:
        for server in servers:
            server.stop()
