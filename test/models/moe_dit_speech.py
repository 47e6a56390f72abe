"""Four architectures a new user tries beside the test zoo's families (families.py), small enough
for a CPU: a decoder whose feed-forward is a mixture of experts with sparse top-2 routing
(nonzero, index_select, index_add: each expert sees the tokens routed to it), a diffusion
transformer (DiT: patches, timestep and class conditioning through adaLN-Zero), a Conformer
encoder (convolution subsampling, half-step feed-forwards, attention with a padding mask, a
convolution module with GLU, depthwise convolution and BatchNorm, dropout), and a Whisper-like
encoder-decoder (Conv1d front end with the tanh GELU, sinusoidal positions in a buffer, a decoder
with cross-attention and tied output embedding). bench/new_user_sweep.py trains them.

Each entry of ARCHITECTURES is (build, batches, loss): build() the eager module in train mode,
batches(generator) two input tuples, loss(output, inputs) the scalar a step differentiates."""
import math
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class Expert(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    """Top-k routing: each token goes to its k experts, weighted by the renormalized gate."""

    def __init__(self, d: int, hidden: int, experts: int, k: int = 2) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList([Expert(d, hidden) for _ in range(experts)])
        self.k = k

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        logits = self.router(flat)
        weights, chosen = torch.topk(logits.softmax(-1), self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for i, expert in enumerate(self.experts):
            hit = chosen == i
            rows = hit.any(-1).nonzero().squeeze(-1)
            if rows.numel() > 0:
                w = (weights * hit.to(weights.dtype)).sum(-1).index_select(0, rows).unsqueeze(-1)
                out = out.index_add(0, rows, expert(flat.index_select(0, rows)) * w.to(flat.dtype))
        balance = logits.float().logsumexp(-1).pow(2).mean()  # the router's z-loss
        return out.reshape(b, t, d), balance


class MoEBlock(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int, experts: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.moe = MoE(d, hidden, experts)

    def forward(self, x: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
        y = self.norm1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        m, balance = self.moe(self.norm2(x))
        return x + m, balance


class MoEDecoder(nn.Module):
    def __init__(self, vocab: int = 64, d: int = 32, heads: int = 4, hidden: int = 48, experts: int = 4,
                 layers: int = 3, length: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(length, d) * 0.02)
        self.blocks = nn.ModuleList([MoEBlock(d, heads, hidden, experts) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: Tensor) -> Tuple[Tensor, Tensor]:
        t = tokens.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=tokens.device), 1)
        x = self.embed(tokens) + self.pos[:t]
        balance = torch.zeros([], device=tokens.device)
        for block in self.blocks:
            x, b = block(x, mask)
            balance = balance + b
        return self.head(self.norm(x)), balance


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(c).chunk(6, dim=1)
        y = modulate(self.norm1(x), shift1, scale1)
        x = x + gate1.unsqueeze(1) * self.attn(y, y, y, need_weights=False)[0]
        return x + gate2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift2, scale2))


class DiT(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, depth: int = 4, patch: int = 4, image: int = 16,
                 classes: int = 10) -> None:
        super().__init__()
        self.patch, self.image, self.d = patch, image, d
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2, d) * 0.02)
        self.time = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.label = nn.Embedding(classes + 1, d)  # the last: no class (classifier-free guidance)
        self.blocks = nn.ModuleList([DiTBlock(d, heads) for _ in range(depth)])
        self.final_ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.norm = nn.LayerNorm(d, elementwise_affine=False)
        self.out = nn.Linear(d, patch * patch * 3)

    def forward(self, x: Tensor, t: Tensor, y: Tensor) -> Tensor:
        half = self.d // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=x.device, dtype=torch.float32) / half)
        angles = t.float().unsqueeze(1) * freqs.unsqueeze(0)
        c = self.time(torch.cat([torch.cos(angles), torch.sin(angles)], dim=1)) + self.label(y)
        h = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        for block in self.blocks:
            h = block(h, c)
        shift, scale = self.final_ada(c).chunk(2, dim=1)
        h = self.out(modulate(self.norm(h), shift, scale))
        n, p, g = x.shape[0], self.patch, self.image // self.patch
        return h.reshape(n, g, g, p, p, 3).permute(0, 5, 1, 3, 2, 4).reshape(n, 3, self.image, self.image)


class FeedForward(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.down(self.drop(F.silu(self.up(self.norm(x))))))


class ConvModule(nn.Module):
    def __init__(self, d: int, kernel: int = 7) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pointwise1 = nn.Conv1d(d, 2 * d, 1)
        self.depthwise = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pointwise2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: Tensor) -> Tensor:
        y = F.glu(self.pointwise1(self.norm(x).transpose(1, 2)), dim=1)
        y = self.pointwise2(F.silu(self.bn(self.depthwise(y))))
        return self.drop(y.transpose(1, 2))


class ConformerBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ff1 = FeedForward(d)
        self.norm_attn = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.conv = ConvModule(d)
        self.ff2 = FeedForward(d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: Tensor, padding: Tensor) -> Tensor:
        x = x + 0.5 * self.ff1(x)
        y = self.norm_attn(x)
        x = x + self.attn(y, y, y, key_padding_mask=padding, need_weights=False)[0]
        x = x + self.conv(x)
        return self.norm(x + 0.5 * self.ff2(x))


class Conformer(nn.Module):
    def __init__(self, mels: int = 16, d: int = 32, heads: int = 4, depth: int = 3, classes: int = 20) -> None:
        super().__init__()
        self.subsample = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.project = nn.Linear(d * (((mels - 1) // 2 - 1) // 2), d)
        self.blocks = nn.ModuleList([ConformerBlock(d, heads) for _ in range(depth)])
        self.head = nn.Linear(d, classes)

    def forward(self, features: Tensor, lengths: Tensor) -> Tensor:
        x = self.subsample(features.unsqueeze(1))
        n, c, t, f = x.shape
        x = self.project(x.permute(0, 2, 1, 3).reshape(n, t, c * f))
        lengths = ((lengths - 1) // 2 - 1) // 2
        padding = torch.arange(t, device=x.device).unsqueeze(0) >= lengths.unsqueeze(1)
        for block in self.blocks:
            x = block(x, padding)
        return self.head(x).log_softmax(-1)


class WhisperBlock(nn.Module):
    def __init__(self, d: int, heads: int, cross: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.cross = cross
        self.norm2 = nn.LayerNorm(d)
        self.cross_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm3 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x: Tensor, memory: Tensor, mask: Tensor) -> Tensor:
        y = self.norm1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        if self.cross:
            y = self.norm2(x)
            x = x + self.cross_attn(y, memory, memory, need_weights=False)[0]
        return x + self.mlp(self.norm3(x))


class WhisperLike(nn.Module):
    def __init__(self, mels: int = 16, d: int = 32, heads: int = 4, depth: int = 2, vocab: int = 50,
                 frames: int = 32, text: int = 12) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(mels, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        position = torch.arange(frames // 2).unsqueeze(1) * torch.exp(-math.log(10000.0) * torch.arange(0, d, 2) / d)
        self.register_buffer("audio_positions", torch.cat([position.sin(), position.cos()], 1))
        self.encoder = nn.ModuleList([WhisperBlock(d, heads, False) for _ in range(depth)])
        self.encoder_norm = nn.LayerNorm(d)
        self.tokens = nn.Embedding(vocab, d)
        self.text_positions = nn.Parameter(torch.randn(text, d) * 0.02)
        self.decoder = nn.ModuleList([WhisperBlock(d, heads, True) for _ in range(depth)])
        self.decoder_norm = nn.LayerNorm(d)

    def forward(self, mel: Tensor, tokens: Tensor) -> Tensor:
        # the tanh GELU: Debian's 1.13 computes the exact one's gradient wrongly after a transpose
        x = F.gelu(self.conv1(mel), approximate="tanh")
        x = F.gelu(self.conv2(x), approximate="tanh").transpose(1, 2) + self.audio_positions
        unmasked = torch.zeros(x.shape[1], x.shape[1], device=mel.device)
        for block in self.encoder:
            x = block(x, x, unmasked)
        memory = self.encoder_norm(x)
        t = tokens.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf"), device=mel.device), 1)
        y = self.tokens(tokens) + self.text_positions[:t]
        for block in self.decoder:
            y = block(y, memory, causal)
        return self.decoder_norm(y) @ self.tokens.weight.t()


Batches = Callable[[torch.Generator], List[Tuple[Tensor, ...]]]
Loss = Callable[[object, Tuple[Tensor, ...]], Tensor]


def _moe_loss(output, inputs):
    logits, balance = output
    tokens = inputs[0]
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens.reshape(-1)) + 0.01 * balance


def _whisper_loss(output, inputs):
    return F.cross_entropy(output.float().reshape(-1, output.shape[-1]), inputs[1].reshape(-1))


ARCHITECTURES: Dict[str, Tuple[Callable[[], nn.Module], Batches, Loss]] = {
    "moe": (MoEDecoder, lambda g: [(torch.randint(0, 64, (4, 16), generator=g),) for _ in range(2)], _moe_loss),
    "dit": (DiT, lambda g: [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 1000, (4,), generator=g),
                             torch.randint(0, 11, (4,), generator=g)) for _ in range(2)],
            lambda output, inputs: (output.float() - inputs[0]).pow(2).mean()),
    "conformer": (Conformer, lambda g: [(torch.randn(4, 40, 16, generator=g), torch.tensor([40, 35, 30, 23]))
                                        for _ in range(2)],
                  lambda output, inputs: -output.float()[:, :, 0].mean()),
    "whisper": (WhisperLike, lambda g: [(torch.randn(4, 16, 32, generator=g), torch.randint(0, 50, (4, 12), generator=g))
                                        for _ in range(2)], _whisper_loss),
}
