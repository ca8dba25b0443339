"""lm-evaluation-harness on a GGUF model through llamabatch (the ``eval`` extra:
``pip install 'llamabatch[eval]'``).

Importing this package registers :class:`LlamaBatchLM` in the harness's model registry
as ``llamabatch``; ``python -m llamabatch.lm_eval`` is the harness's own command line
with it registered. ``import llamabatch`` never imports this package.
"""

from __future__ import annotations

from .model import MODEL_NAME, LlamaBatchLM

__all__ = ["MODEL_NAME", "LlamaBatchLM"]
