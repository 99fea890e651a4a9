"""A model architecture as sagellm reasons about it (from the catalog or a Hugging Face config.json)."""

from __future__ import annotations

from dataclasses import dataclass

# Bytes per weight/KV element by quantization (method.md §4); 4-bit keeps ~0.5 B plus scales.
BYTES_PER_PARAM = {"none": 2.0, "fp8": 1.0, "eetq": 1.0, "bitsandbytes": 1.0, "gptq": 0.5, "awq": 0.5}


@dataclass(frozen=True)
class Model:
    """A model architecture, from its Hugging Face config."""

    hf_id: str
    params_b: float
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_context: int
    active_params_b: float | None = None
    n_experts: int = 1
    experts_per_token: int = 1
    alias: str | None = None
    parallel_attention: bool = False  # attention and MLP side by side: one all-reduce per layer under TP
    gated: bool = False  # the Hub serves the weights only with a token of an account that accepted the licence
    architecture: str | None = None  # the transformers class (config.json `architectures`), where known
    dtype: str | None = None  # the weights' dtype in config.json (torch_dtype), where known
    sliding_window: int | None = None  # tokens a sliding-window attention layer sees, where the config has one
    quantization: str | None = None  # how the checkpoint's weights are stored: config.json quantization_config.quant_method
    source: str = "catalog"  # where the facts come from: the catalog, or a config.json from the Hub
    folder: str | None = None  # the local folder the config.json was read from (its weights are on this machine)
    # Compressed-KV attention (DeepSeek's MLA): each token caches one latent of this width per layer, plus its
    # rotary key part, shared by every head (vLLM's MLAAttentionSpec; the latent is replicated on every TP rank).
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0

    @property
    def active_b(self) -> float:
        """Parameters touched per token (MoE reads only its active experts)."""
        return self.active_params_b or self.params_b

    @property
    def compressed_kv(self) -> bool:
        """Whether attention caches a compressed latent (MLA) instead of per-head keys and values."""
        return self.kv_lora_rank is not None

    @property
    def cached_kv_heads(self) -> int:
        """Heads a token's cache entry is split into: MLA's one latent, else the KV heads."""
        return 1 if self.compressed_kv else self.n_kv_heads

    def kv_bytes_per_token(self, bytes_per_elem: float = 2.0) -> float:
        """KV cache bytes per token: 2 (K and V) × layers × KV heads × head dim × bytes; with MLA, layers × (latent
        + rotary key) × bytes (vllm/model_executor/models/deepseek_v2.py@v0.32.0: `kv_lora_rank +
        qk_rope_head_dim` per token, one head, no separate V)."""
        if self.kv_lora_rank is not None:
            return self.n_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * bytes_per_elem
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * bytes_per_elem

    def weight_bytes(self, quantization: str = "none") -> float:
        """Bytes of weights at a quantization."""
        return self.params_b * 1e9 * BYTES_PER_PARAM[quantization]
