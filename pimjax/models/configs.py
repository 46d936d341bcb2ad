"""Vendored decoder configurations of the LLMs DCC and AttAcc evaluate (nothing is downloaded).

Each `ModelConfig` holds what the shapes of one decoder layer need; weights are
never materialised here (`layers.param_shapes` gives `jax.ShapeDtypeStruct`s).

Sources (architecture hyper-parameters as published):

* GPT-3 13B -- Brown et al., "Language Models are Few-Shot Learners" (2020),
  Table 2.1: 40 layers, 40 heads x 128, context 2048; FFN 4 d, GELU, LayerNorm,
  biases on every linear layer, learned position embeddings, GPT-2 BPE vocabulary
  50257.  The table prints d_model 5140; we use 5120 = 40 x 128, as AttAcc's
  system model (`src/config.py`, 'GPT-13B': [40, 5120, 40, 128, 4, 1]) and DCC do.
* GPT-3 175B -- Brown et al. (2020), Table 2.1: 96 layers, d_model 12288, 96
  heads x 128, context 2048, the same architecture as GPT-3 13B (AttAcc's
  `src/config.py` 'GPT-175B': [96, 12288, 96, 128, 4, 1]).
* LLaMA-2 7B / 13B / 70B -- Touvron et al., "Llama 2" (2023), Table 1 and the
  released model cards (config.json: hidden_size, intermediate_size,
  num_hidden_layers, num_attention_heads, num_key_value_heads): 7B 4096 / 11008 /
  32 / 32, 13B 5120 / 13824 / 40 / 40, 70B 8192 / 28672 / 80 / 64 with 8 KV heads
  (grouped-query attention).  RMSNorm, SwiGLU, RoPE, no biases, vocabulary 32000,
  untied input / output embeddings.
* "LLaMA-2 33B" -- DCC's Fig. 8 name; no LLaMA-2 33B was released, so this is the
  LLaMA-1 33B architecture (Touvron et al., "LLaMA" (2023), Table 2: d 6656, 52
  heads, 60 layers); its FFN 17920 = 2/3 x 4 d rounded up to a multiple of 256, the
  rule of the reference implementation (`multiple_of=256`).

* LLaMA-3 8B / 70B -- Meta's Llama 3 model card and released config.json
  (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
  intermediate_size, vocab_size): 8B 4096 / 32 / 32 / 8 / 14336 / 128256, 70B
  8192 / 80 / 64 / 8 / 28672 / 128256 -- grouped-query attention (8 KV heads)
  in both, the 128k-token tiktoken vocabulary, context 8192; RMSNorm, SwiGLU,
  RoPE, no biases, untied embeddings (as LLaMA-2).

Parameter counts derived from this table (`ModelConfig.n_params`, embeddings
included) match the published sizes: GPT-3 13B 12.85e9 ("13.0B" with d 5140),
GPT-3 175B 174.6e9 ("175.0B"), LLaMA-2 7B 6.74e9, 13B 13.02e9, 33B 32.5e9, 70B 68.98e9, LLaMA-3
8B 8.03e9, 70B 70.55e9.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """One decoder-only transformer.

    d_model: hidden size; n_layers: decoder layers; n_heads: query heads;
    n_kv_heads: key / value heads (< n_heads: grouped-query attention);
    head_dim: per-head size (d_model / n_heads); d_ff: FFN inner size;
    norm: "layernorm" (with bias) | "rmsnorm"; ffn: "gelu" (up, GELU, down) |
    "swiglu" (gate, up, SiLU(gate) * up, down); bias: linear layers have biases;
    rope: rotary position embeddings on q and k; vocab, max_seq: embedding sizes.
    """
    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    norm: str
    ffn: str
    bias: bool
    rope: bool
    vocab: int
    max_seq: int
    tied_embeddings: bool = False
    learned_positions: bool = False
    source: str = ""
    head_size: int = 0          # 0: d_model / n_heads; set by `tensor_parallel`

    def __post_init__(self):
        if not self.head_size and self.d_model % self.n_heads:
            raise ValueError(f"{self.name}: d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_heads {self.n_heads} is not a multiple of n_kv_heads "
                             f"{self.n_kv_heads}")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"{self.name}: norm {self.norm!r} not in ('layernorm', 'rmsnorm')")
        if self.ffn not in ("gelu", "swiglu"):
            raise ValueError(f"{self.name}: ffn {self.ffn!r} not in ('gelu', 'swiglu')")

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.n_heads

    @property
    def q_dim(self) -> int:
        """Width of the query / attention output (n_heads x head_dim)."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Parameters of one decoder layer (weights, biases, norm scales)."""
        d, kv, f, qd = self.d_model, self.kv_dim, self.d_ff, self.q_dim
        n = d * qd + 2 * d * kv + qd * d                     # q, k, v, o
        n += (3 if self.ffn == "swiglu" else 2) * d * f      # FFN matrices
        if self.bias:
            n += qd + 2 * kv + d + (f + d if self.ffn == "gelu" else 2 * f + d)
        n += 2 * d * (2 if self.norm == "layernorm" else 1)  # two norms per layer
        return n

    @property
    def n_params(self) -> int:
        """All parameters: layers, final norm, token (and position) embeddings, LM head."""
        d = self.d_model
        n = self.n_layers * self.layer_params() + d * (2 if self.norm == "layernorm" else 1)
        n += self.vocab * d * (1 if self.tied_embeddings else 2)
        if self.learned_positions:
            n += self.max_seq * d
        return n

    def tensor_parallel(self, tp: int) -> "ModelConfig":
        """One GPU's share of a layer under Megatron tensor parallelism over `tp`
        GPUs: heads, KV heads and the FFN width split `tp` ways (QKV / FFN-up
        column-parallel, projection / FFN-down row-parallel); d_model and the
        head size stay.  The all-reduces after the projection and the FFN are
        not part of the layer (not modelled)."""
        if self.n_heads % tp or self.d_ff % tp:
            raise ValueError(f"{self.name}: n_heads {self.n_heads} and d_ff {self.d_ff} must divide by tp={tp}")
        kv = self.n_kv_heads // tp if self.n_kv_heads % tp == 0 else 1   # fewer KV heads than GPUs: replicated
        return self.scaled(name=f"{self.name}/tp{tp}", n_heads=self.n_heads // tp, n_kv_heads=kv,
                           d_ff=self.d_ff // tp, head_size=self.head_dim)

    def scaled(self, **changes) -> "ModelConfig":
        """A copy with `changes` (e.g. tiny dimensions for tests)."""
        from dataclasses import replace
        return replace(self, **changes)


_LLAMA2 = "Touvron et al. 2023, Llama 2, Table 1 / model card config.json"
_LLAMA3 = "Meta, Llama 3 model card (MODEL_CARD.md, meta-llama/llama3) / config.json"
CONFIGS: dict[str, ModelConfig] = {
    "gpt3-13b": ModelConfig("gpt3-13b", 5120, 40, 40, 40, 20480, "layernorm", "gelu", True, False,
                            50257, 2048, tied_embeddings=True, learned_positions=True,
                            source="Brown et al. 2020, Table 2.1 (d 5120 as AttAcc's config.py)"),
    "gpt3-175b": ModelConfig("gpt3-175b", 12288, 96, 96, 96, 49152, "layernorm", "gelu", True, False,
                             50257, 2048, tied_embeddings=True, learned_positions=True,
                             source="Brown et al. 2020, Table 2.1 (as AttAcc's config.py 'GPT-175B')"),
    "llama2-7b": ModelConfig("llama2-7b", 4096, 32, 32, 32, 11008, "rmsnorm", "swiglu", False, True,
                             32000, 4096, source=_LLAMA2),
    "llama2-13b": ModelConfig("llama2-13b", 5120, 40, 40, 40, 13824, "rmsnorm", "swiglu", False, True,
                              32000, 4096, source=_LLAMA2),
    "llama2-33b": ModelConfig("llama2-33b", 6656, 60, 52, 52, 17920, "rmsnorm", "swiglu", False, True,
                              32000, 2048, source="Touvron et al. 2023, LLaMA, Table 2 (33B; DCC's "
                              "'LLaMA2-33B'); FFN by the reference code's multiple_of=256 rule"),
    "llama2-70b": ModelConfig("llama2-70b", 8192, 80, 64, 8, 28672, "rmsnorm", "swiglu", False, True,
                              32000, 4096, source=_LLAMA2 + " (GQA: 8 KV heads)"),
    "llama3-8b": ModelConfig("llama3-8b", 4096, 32, 32, 8, 14336, "rmsnorm", "swiglu", False, True,
                             128256, 8192, source=_LLAMA3 + " (8B; GQA: 8 KV heads)"),
    "llama3-70b": ModelConfig("llama3-70b", 8192, 80, 64, 8, 28672, "rmsnorm", "swiglu", False, True,
                              128256, 8192, source=_LLAMA3 + " (70B; GQA: 8 KV heads)"),
}

# the sizes the papers / model cards publish, for checking the table (tests)
PUBLISHED_PARAMS = {"gpt3-13b": 13.0e9, "gpt3-175b": 175.0e9, "llama2-7b": 6.74e9, "llama2-13b": 13.02e9,
                    "llama2-33b": 32.5e9, "llama2-70b": 68.98e9, "llama3-8b": 8.03e9, "llama3-70b": 70.55e9}


def get_config(name: str) -> ModelConfig:
    """The vendored config `name` (see `CONFIGS`); ValueError listing the valid names."""
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid models: {sorted(CONFIGS)}") from None
