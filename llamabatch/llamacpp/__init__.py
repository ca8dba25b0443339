"""The real backend: llama.cpp through a loaded ``llama_cpp.Llama``, and llama.cpp's own
behaviour it follows (ubatch split, sliding window). Importing it loads no library;
importing :mod:`.backend` checks the installed llama-cpp-python's version."""
