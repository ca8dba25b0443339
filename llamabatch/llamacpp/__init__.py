"""The real backend: llama.cpp through a loaded ``llama_cpp.Llama`` (context, batch,
sampler, :class:`~llamabatch.llamacpp.backend.LlamaBackend`). Importing it loads no library,
but checks the installed llama-cpp-python's version (package metadata only) and raises
:class:`~llamabatch.errors.LibraryError` naming the supported range when it is outside it
(:mod:`llamabatch._ffi.version`)."""

from .._ffi.version import check_version

check_version()
