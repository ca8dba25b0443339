"""``python -m llamabatch.lm_eval ARGS``: lm-evaluation-harness's ``lm_eval`` command with
the ``llamabatch`` model registered (``--model llamabatch --model_args model=GGUF``)."""

from __future__ import annotations

from lm_eval.__main__ import cli_evaluate

from . import MODEL_NAME  # noqa: F401 - registers the model

if __name__ == "__main__":
    cli_evaluate()
