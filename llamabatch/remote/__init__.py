"""The same job over a pool of OpenAI-compatible servers (llama-server, llama-cpp-python's
server, vLLM): :class:`RemoteGenerator` has :class:`~llamabatch.BatchGenerator`'s
``iter_groups`` / ``complete_many`` / ``stats`` / ``close`` and yields
:class:`RemoteCompletion` objects (``path == "remote"``). Needs httpx
(``pip install 'llamabatch[remote]'``).
"""

from .client import ItemRejected, ServerFault
from .generator import RemoteCompletion, RemoteGenerator, RemoteStats
from .pool import PoolUnavailable, Server, ServerPool, normalize_url
from .request import build_request, choices_grammar

__all__ = ["ItemRejected", "PoolUnavailable", "RemoteCompletion", "RemoteGenerator",
           "RemoteStats", "Server", "ServerFault", "ServerPool", "build_request",
           "choices_grammar", "normalize_url"]
