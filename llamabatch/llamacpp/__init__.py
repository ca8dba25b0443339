"""The real backend: llama.cpp through a loaded ``llama_cpp.Llama`` (context, batch,
sampler, :class:`~llamabatch.llamacpp.backend.LlamaBackend`), and llama.cpp's own
behaviour that the backend (and the fake that models it) follows: how a decode call is
split into ubatches (:mod:`.ubatch`) and what a sliding window keeps (:mod:`.window`).
Importing it loads no library; loading one checks the installed llama-cpp-python's
version (:func:`llamabatch._ffi.version.check_version`)."""
