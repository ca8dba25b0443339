"""The real backend: llama.cpp through a loaded ``llama_cpp.Llama`` (context, batch,
sampler, :class:`~llamabatch.llamacpp.backend.LlamaBackend`). Importing it loads no library."""
