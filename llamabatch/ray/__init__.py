"""llamabatch on Ray Data: the slot engine as a ``map_batches`` callable class, one model
per actor (:class:`BatchCompleter`), and :func:`processor`, a ``Dataset -> Dataset``
function shaped like Ray Data LLM's processors (:class:`ProcessorConfig`). The command
line's ``llamabatch complete --ray`` runs on them (:class:`RayJob`).

Running a dataset needs Ray Data (``pip install 'llamabatch[ray]'``), imported only
then; the callable class itself needs only NumPy.
"""

from .completer import BatchCompleter
from .job import RayJob
from .processors import ProcessorConfig, processor

__all__ = ["BatchCompleter", "ProcessorConfig", "RayJob", "processor"]
