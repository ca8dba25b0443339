#!/usr/bin/env python3
"""Write a llama-architecture GGUF with random F16 weights and a byte-level tokenizer.

For throughput measurements only: the time of a decode does not depend on the weights'
values, so a model of a realistic shape needs no download. Written with llama.cpp's own
``gguf`` package (``gguf-py`` in llama.cpp's sources; put it on ``sys.path``).

- Shape: llama (``LLM_ARCH_LLAMA``: RMS norm, RoPE, grouped-query attention, SwiGLU
  FFN), token embeddings tied to the output (no ``output.weight``), every matrix F16,
  the norms F32 (ones). The ``1b`` preset has the dimensions of Llama 3.2 1B
  (hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocabulary 128256:
  1.24 B parameters, 2.5 GB), from its published config.json.
- Tokenizer: SentencePiece-style (``tokenizer.ggml.model = "llama"``) with ``<unk>``,
  ``<s>``, ``</s>`` (ids 0-2), the 256 byte tokens ``<0x00>``..``<0xFF>`` (llama.cpp's
  byte fallback needs every one), one piece per printable ASCII character and ``▁``,
  then filler pieces ``t<N>`` up to the vocabulary size. Text tokenizes to about one
  token per character; prompts may as well be token ids.
- EOG never wins greedy sampling: the rows of the EOG ids (``</s>``) in the tied
  embedding are zero, so their logit is exactly 0 while the largest of the other
  ~n_vocab random logits is positive; replies run to ``max_tokens`` on every path (ours,
  ``Llama.create_completion``) without touching the samplers.
- Weights: normal with standard deviation ``std``; to write gigabytes fast, each tensor
  repeats a random pool of 2**22 values from a random offset (values do not matter).

Usage::

    python random_gguf.py OUT.gguf [--preset 1b|small|tiny] [--seed N] [--info OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: SentencePiece's word-boundary marker.
SPACE = "\u2581"
UNK, BOS, EOS = 0, 1, 2
#: gguf's TokenType values (llama.cpp llama-vocab: NORMAL 1, UNKNOWN 2, CONTROL 3, BYTE 6).
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
#: GGUF general.file_type of "mostly F16" (llama.h LLAMA_FTYPE_MOSTLY_F16).
FTYPE_MOSTLY_F16 = 1
POOL = 1 << 22


def base_pieces() -> list[tuple[str, int]]:
    """(piece, token type) of the ids below the fillers: specials, bytes, ASCII, ``▁``."""
    pieces = [("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL)]
    pieces += [(f"<0x{b:02X}>", BYTE) for b in range(256)]
    pieces += [(chr(c), NORMAL) for c in range(0x21, 0x7F)]
    pieces.append((SPACE, NORMAL))
    return pieces


@dataclass(frozen=True, slots=True)
class Shape:
    """The hyperparameters of the model (llama.cpp's names).

    Attributes:
        n_vocab: vocabulary size (>= 256 + 3 + the ASCII pieces, i.e. >= 355).
        n_embd: hidden size; a multiple of ``n_head``.
        n_layer, n_head, n_head_kv, n_ff: layers, attention heads, KV heads (divides
            ``n_head``), FFN hidden size.
        n_ctx_train: ``llama.context_length``.
    """

    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx_train: int = 8192

    def __post_init__(self) -> None:
        if self.n_vocab < len(base_pieces()):
            raise ValueError(
                f"n_vocab={self.n_vocab} is below {len(base_pieces())} (the base pieces)"
            )
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise ValueError(
                f"n_embd={self.n_embd}, n_head={self.n_head}, n_head_kv={self.n_head_kv}: "
                "n_head must divide n_embd and n_head_kv must divide n_head"
            )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def tensors(self) -> list[tuple[str, tuple[int, ...], type]]:
        """(name, numpy shape, dtype) of every tensor, in file order."""
        d, kv, ff = self.n_embd, self.head_dim * self.n_head_kv, self.n_ff
        out: list[tuple[str, tuple[int, ...], type]] = [
            ("token_embd.weight", (self.n_vocab, d), np.float16)
        ]
        for i in range(self.n_layer):
            b = f"blk.{i}."
            out += [
                (b + "attn_norm.weight", (d,), np.float32),
                (b + "attn_q.weight", (d, d), np.float16),
                (b + "attn_k.weight", (kv, d), np.float16),
                (b + "attn_v.weight", (kv, d), np.float16),
                (b + "attn_output.weight", (d, d), np.float16),
                (b + "ffn_norm.weight", (d,), np.float32),
                (b + "ffn_gate.weight", (ff, d), np.float16),
                (b + "ffn_up.weight", (ff, d), np.float16),
                (b + "ffn_down.weight", (d, ff), np.float16),
            ]
        out.append(("output_norm.weight", (d,), np.float32))
        return out

    @property
    def n_params(self) -> int:
        return sum(int(np.prod(s)) for _, s, _ in self.tensors())


PRESETS: dict[str, Shape] = {
    # Llama 3.2 1B's config.json: hidden_size 2048, num_hidden_layers 16,
    # num_attention_heads 32, num_key_value_heads 8, intermediate_size 8192, vocab 128256
    "1b": Shape(128256, 2048, 16, 32, 8, 8192),
    # a CPU-sized model with a real vocabulary (~9 M parameters)
    "small": Shape(32000, 256, 4, 4, 2, 768),
    # Llama 3's vocabulary on a tiny body: a decode that is mostly the output layer, as
    # on a GPU the host work per step shows (benchmarks/host_cost.py)
    "widevocab": Shape(128256, 128, 2, 4, 2, 512),
    # for tests: loads in milliseconds
    "tiny": Shape(512, 64, 2, 4, 2, 128, n_ctx_train=2048),
}


def vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types of a vocabulary of ``n_vocab`` entries."""
    base = base_pieces()
    tokens = [p for p, _ in base] + [f"t{i}" for i in range(n_vocab - len(base))]
    types = [t for _, t in base] + [NORMAL] * (n_vocab - len(base))
    scores = [0.0] * n_vocab
    return tokens, scores, types


def _fill(rng: np.random.Generator, pool: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    start = int(rng.integers(POOL))
    return np.resize(np.roll(pool, -start), n).reshape(shape)


def write_random_llama(
    path: str | Path, shape: Shape, *, seed: int = 0, std: float = 0.02, name: str = "random-llama"
) -> dict[str, Any]:
    """Write the model to ``path``.

    Args:
        path: the GGUF file to write (replaced).
        shape: the hyperparameters.
        seed: of the weights.
        std: standard deviation of the matrices' entries.
        name: ``general.name``.

    Returns:
        a summary: the shape, ``n_params``, ``bytes`` (file size), ``eog_ids``, ``seconds``.

    Raises:
        ImportError: llama.cpp's ``gguf`` package is not importable.
    """
    import gguf

    t0 = time.perf_counter()
    path = Path(path)
    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(POOL, dtype=np.float32) * std).astype(np.float16)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(shape.n_vocab)
    w.add_file_type(FTYPE_MOSTLY_F16)
    tokens, scores, types = vocab(shape.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(UNK)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_add_bos_token(True)
    specs = shape.tensors()
    for tname, tshape, dtype in specs:
        nbytes = int(np.prod(tshape)) * np.dtype(dtype).itemsize
        w.add_tensor_info(tname, tshape, np.dtype(dtype), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for tname, tshape, dtype in specs:
        if dtype is np.float32:
            data = np.ones(tshape, dtype=np.float32)
        else:
            data = _fill(rng, pool, tshape)
            if tname == "token_embd.weight":
                data[EOS] = 0  # the tied output row of EOG: logit exactly 0
        w.write_tensor_data(data)
    w.close()
    return {
        **asdict(shape),
        "n_params": shape.n_params,
        "bytes": path.stat().st_size,
        "eog_ids": [EOS],
        "type": "F16",
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="1b")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--info", type=Path, default=None, help="also write the summary here (JSON)")
    args = ap.parse_args(argv)
    info = write_random_llama(args.out, PRESETS[args.preset], seed=args.seed)
    print(json.dumps(info))
    if args.info is not None:
        args.info.write_text(json.dumps(info) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
