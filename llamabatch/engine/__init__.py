"""The slot engine: pure Python, no native library.

The scheduler (:mod:`.scheduler`) turns prompts into slots and decode plans, the slot engine
(:mod:`.slot_engine`) runs one step at a time against a :class:`~.backend.Backend`, and the
helpers below it hold plain data: one decode's spans (:mod:`.plan`), the slots' prompt-cache
bookkeeping (:mod:`.slots`), the stop rule (:mod:`.stop`), the host-memory cache
(:mod:`.host_cache`) and the prepared items (:mod:`.items`). Nothing in this package imports
llama_cpp, :mod:`llamabatch._ffi` or numpy (``tests/engine/test_engine_is_pure.py``).
"""
