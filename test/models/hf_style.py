"""Models written the way Hugging Face-style libraries write them, which TorchScript cannot script:
a config object read in forward, keyword arguments with None defaults, **kwargs passed down to the
layers, an output dataclass (loss, logits, optional hidden states), scaled_dot_product_attention
with is_causal=True, and a padding mask made from the batch. The "llama" kind is written as
Hugging Face writes its Llama: RMSNorm, rotary embeddings computed under @torch.no_grad() with
autocast off inside, a gated MLP, position ids as an optional keyword argument."""
import dataclasses
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclasses.dataclass
class Config:
    vocab_size: int = 96
    hidden_size: int = 32
    num_heads: int = 4
    num_layers: int = 4
    intermediate_size: int = 64
    dropout: float = 0.1
    num_labels: int = 3
    output_hidden_states: bool = False


@dataclasses.dataclass
class ModelOutput:
    loss: Optional[Tensor] = None
    logits: Optional[Tensor] = None
    hidden_states: Optional[Tuple[Tensor, ...]] = None


torch.export.register_dataclass(ModelOutput) if hasattr(torch, "export") and hasattr(
    torch.export, "register_dataclass") else None


class Attention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor, attention_mask: Optional[Tensor] = None, is_causal: bool = False,
                **kwargs: Any) -> Tensor:
        b, t, d = x.shape
        heads = self.config.num_heads
        q, k, v = self.qkv(x).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()
        p = self.config.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=is_causal)
        return F.dropout(self.out(y.transpose(1, 2).reshape(b, t, d)), p, self.training)


class Layer(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.attention = Attention(config)
        self.norm2 = nn.LayerNorm(config.hidden_size)
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        x = x + self.attention(self.norm1(x), **kwargs)
        return x + self.dropout(self.down(F.gelu(self.up(self.norm2(x)))))


class Backbone(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(256, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.hidden_size)

    def forward(self, input_ids: Tensor, output_hidden_states: Optional[bool] = None,
                **kwargs: Any) -> Tuple[Tensor, Optional[Tuple[Tensor, ...]]]:
        keep = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embed(input_ids) + self.positions(positions)
        hidden = [x] if keep else None
        for layer in self.layers:
            x = layer(x, **kwargs)
            if hidden is not None:
                hidden.append(x)
        return self.norm(x), None if hidden is None else tuple(hidden)


class CausalLM(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: Tensor, labels: Optional[Tensor] = None,
                output_hidden_states: Optional[bool] = None, **kwargs: Any) -> ModelOutput:
        x, hidden = self.model(input_ids, output_hidden_states=output_hidden_states, is_causal=True, **kwargs)
        logits = self.lm_head(x)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, self.config.vocab_size), labels[:, 1:].reshape(-1))
        return ModelOutput(loss=loss, logits=logits, hidden_states=hidden)


class SequenceClassifier(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None,
                labels: Optional[Tensor] = None, **kwargs: Any) -> ModelOutput:
        x, hidden = self.model(input_ids, attention_mask=attention_mask, **kwargs)
        if attention_mask is None:
            pooled = x.mean(1)
        else:
            weights = attention_mask.to(x.dtype)[:, :, None]
            pooled = (x * weights).sum(1) / weights.sum(1)
        logits = self.classifier(pooled)
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return ModelOutput(loss=loss, logits=logits, hidden_states=hidden)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        dim = config.hidden_size // config.num_heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor) -> Tuple[Tensor, Tensor]:
        inv_freq = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        positions = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):  # force float32
            freqs = (inv_freq.float() @ positions.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor, position_embeddings: Tuple[Tensor, Tensor], **kwargs: Any) -> Tensor:
        b, t, d = x.shape
        shape = (b, t, self.config.num_heads, d // self.config.num_heads)
        q, k, v = (proj(x).view(shape).transpose(1, 2) for proj in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = (e.unsqueeze(1) for e in position_embeddings)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d))


class LlamaLayer(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        d, i = config.hidden_size, config.intermediate_size
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.self_attn = LlamaAttention(config)
        self.gate_proj, self.up_proj = nn.Linear(d, i, bias=False), nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), **kwargs)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaLM(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary_emb = RotaryEmbedding(config)
        self.layers = nn.ModuleList(LlamaLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: Tensor, labels: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
                **kwargs: Any) -> ModelOutput:
        x = self.embed_tokens(input_ids)
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        position_embeddings = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, position_embeddings=position_embeddings, **kwargs)
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, self.config.vocab_size), labels[:, 1:].reshape(-1))
        return ModelOutput(loss=loss, logits=logits)


def make(kind: str, seed: int = 0, **config: Any) -> nn.Module:
    torch.manual_seed(seed)
    model = {"causal_lm": CausalLM, "classifier": SequenceClassifier, "llama": LlamaLM}[kind](Config(**config))
    return model.train()


def batch(kind: str, length: int, batch_size: int = 4, seed: int = 0, config: Config = Config()) -> dict:
    """Keyword arguments of one training call; the classifier's rows are padded to `length`."""
    g = torch.Generator().manual_seed(seed * 1000 + length)
    ids = torch.randint(0, config.vocab_size, (batch_size, length), generator=g)
    if kind in ("causal_lm", "llama"):
        return {"input_ids": ids, "labels": ids}
    lengths = torch.randint(length // 2, length + 1, (batch_size,), generator=g)
    lengths[0] = length
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.randint(0, config.num_labels, (batch_size,), generator=g)}
