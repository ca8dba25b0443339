"""A local Ray cluster for the tests of :mod:`llamabatch.ray`: started by each module
that needs it (2 CPUs, no dashboard, loopback only) and stopped after it.

The tests need Ray Data (``pip install 'llamabatch[ray]'``); without it they are skipped,
saying so.
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the Ray tests need pip install 'llamabatch[ray]'")


@pytest.fixture(scope="module")
def ray_address() -> str:
    """The address of a fresh local cluster (``HOST:PORT`` of its GCS, on 127.0.0.1);
    this process is connected to it."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
