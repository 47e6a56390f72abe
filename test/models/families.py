"""Model families beyond the torchvision CNNs, each parametrized by size: tiny for the tests
("test"), realistic for the benchmarks on the CPU ("bench"); the GPT and the encoder also have a
GPU size ("large": sequence 1024, d 1024, 16 heads, 12 blocks, batch 8).

    FAMILIES[name](size="test", device="cpu") -> Family

A Family holds `make(seed)` (a freshly built and scripted module in train() mode; the same seed
gives the same parameters), `inputs` (the example inputs, always the same), `loss(output)` (a
scalar of every floating tensor in the output: a tensor, tuple or dict), `blocks` (how many
blocks or layers the model chains, each of which should become at least one jitckpt stage) and a
short `name`. Reference copies are made by calling make(seed) again: on PyTorch 1.13,
copy.deepcopy of a scripted module gives non-leaf parameters.

Families (all script on PyTorch 1.13 and 2.x, with dropout where the family has it):
  transformer_encoder  nn.TransformerEncoder (batch_first) with a bool padding mask input
  gpt_mask_input       GPT decoder, matmul/softmax attention, additive causal mask passed in
  gpt_mask_builtin     the same, causal mask (torch.triu) and positions (torch.arange) built in forward
  llama                Llama-style: RMSNorm, rotary positions, grouped-query attention, SwiGLU, tied head
  cosine_attention     Swin V2-style: cosine attention, a position bias from an MLP, a bias zeroed on a clone
  bert_encoder         BERT encoder, 0/1 attention mask made additive in forward, post-LN, pooler
  encoder_decoder      pre-LN encoder-decoder, source padding mask: every decoder block reads the encoder's output
  two_input            an image branch of convs and a vector input, fused; returns (logits, aux)
  unet                 U-Net (4 levels, long skips by torch.cat)
  densenet121          torchvision's DenseNet-121 (memory_efficient=False)
  lstm_stack           embedding, a stack of single-layer nn.LSTM modules, head
  gru                  embedding, a stack of two-layer nn.GRU modules (dropout drawn inside the kernel), head
  dict_output          a conv chain returning {"logits": ..., "features": ...}
  list_output          a backbone returning every level's feature map in a list built by append
"""
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SIZES = ("test", "bench", "large")


def cpu_autocast_casts_to(dtype: torch.dtype) -> bool:
    """1.13's CPU autocast takes bfloat16 only; 2.x's takes float16 too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autocast("cpu", dtype=dtype):
                return torch.nn.functional.linear(torch.ones(1, 1), torch.ones(1, 1)).dtype == dtype
        except RuntimeError:  # "AutocastCPU only support Bfloat16"
            return False


def tensors_of(output: Any) -> List[Tensor]:
    """Every tensor of a forward's output, in a fixed order (dicts by key)."""
    if isinstance(output, Tensor):
        return [output]
    if isinstance(output, dict):
        return [t for key in sorted(output) for t in tensors_of(output[key])]
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in tensors_of(item)]
    return []


# What a step may hold beside the plan, its loss and its gradients: the loss and its gradient (two
# scalars), the small tensors the model keeps outside the chain for its own backward (positions
# an embedding saves: 256 bytes; a head's), and on 2.x about 130 bytes of nn.Transformer's fused
# layers (not found yet). The peak checks allow it over the limit.
OUTSIDE_CHAIN_BYTES = 1024


# Ops whose output shares its input's storage: the chain may hold a view of an input.
_VIEWS = {"aten::view", "aten::reshape", "aten::transpose", "aten::t", "aten::permute", "aten::unsqueeze",
          "aten::squeeze", "aten::expand", "aten::select", "aten::slice", "aten::contiguous",
          "aten::flatten", "aten::detach", "aten::alias"}


def _storage(t: Tensor):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def caller_held_bytes(rewritten: torch.jit.ScriptModule, inputs: Tuple[Any, ...], block: int = 1) -> int:
    """Bytes of the caller's input tensors that the chain of a rewritten module holds (its input
    and side tensors: a mask, token ids the chain embeds), found in the forward graph: the inputs
    of jitckpt::chain that are forward's arguments, or views of them. The limit counts them
    (Costs::wa[0]), but a step finds them allocated before it starts, so that a peak measured
    above what was live leaves them out: added back, a check does not pass by their size. Each
    storage is rounded up to whole `block`s, as the allocator that counts the step rounds it."""
    graph = rewritten.graph
    arguments = [v.unique() for v in list(graph.inputs())[1:]]  # after self
    chains = [n for n in graph.nodes() if n.kind() == "jitckpt::chain"]
    assert len(chains) == 1, f"{len(chains)} jitckpt::chain nodes in forward"
    held = {}
    for listed in list(chains[0].inputs())[:2]:  # the chain inputs, the lifted tensors
        for v in listed.node().inputs():
            while v.node().kind() in _VIEWS:
                v = next(iter(v.node().inputs()))
            if v.unique() in arguments:
                t = inputs[arguments.index(v.unique())]
                held[_storage(t).data_ptr()] = -(-_storage(t).nbytes() // block) * block
    return sum(held.values())


def _like(output: Any, tensors: List[Tensor]) -> Any:
    """`output` with its tensors (in tensors_of's order) replaced by `tensors`."""
    it = iter(tensors)

    def rebuild(o: Any) -> Any:
        if isinstance(o, Tensor):
            return next(it)
        if isinstance(o, dict):
            return {key: rebuild(o[key]) for key in sorted(o)}
        if isinstance(o, (tuple, list)):
            return type(o)(rebuild(item) for item in o)
        return o
    return rebuild(output)


def loss_held_bytes(output: Any, loss: Callable[[Any], Tensor]) -> int:
    """The peak of loss(output) and its backward on stand-ins for `output` (the same storages), less
    the stand-ins' gradients, which the plan counts as the output's: memory of the caller's,
    outside any limit (a squared copy of the logits, a cross-entropy's softmax). An upper bound on
    what the loss adds to a step's peak."""
    from jitckpt import cpu_memory
    stand_ins = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors_of(output)]
    with cpu_memory() as memory:
        loss(_like(output, stand_ins)).backward()
    return max(0, memory.peak - sum(t.numel() * t.element_size() for t in stand_ins if t.requires_grad))


def eager_step_peak(model: nn.Module, kwargs: Dict[str, Any], loss: Callable[[Tensor], Tensor],
                    autocast: bool = False) -> Tuple[int, int, Dict[str, Any]]:
    """A plain module checkpointed through export (a jitckpt CheckpointedModule) called on `kwargs`
    twice, the first call planning: the second step's measured peak above what was live before it,
    with the caller's inputs that the chain holds added back; what the limit allows it (the plan's
    limit, the loss's own bytes on the logits and OUTSIDE_CHAIN_BYTES); and the plan."""
    import jitckpt
    from jitckpt.export import capture

    def logits() -> Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return model(**kwargs).logits

    loss_bytes = loss_held_bytes(logits(), loss)
    info = jitckpt.plan(model)
    model.zero_grad(set_to_none=True)
    with jitckpt.cpu_memory() as memory:
        loss(logits()).backward()
    flat = capture.flatten((), kwargs)[0]
    held = caller_held_bytes(model.rewritten, tuple(capture.arguments(model._captures[0][0], flat)))
    return memory.peak + held, info["memory_limit"] + loss_bytes + OUTSIDE_CHAIN_BYTES, info


def adamw_record(model: nn.Module, micro_batch_loss: Callable[[int], Tensor], micro_batches: int = 4,
                 lr: float = 1e-3, max_norm: float = 1.0) -> List[Tensor]:
    """AdamW over `micro_batches` losses (micro_batch_loss(i) runs the model), two a step,
    gradients clipped to `max_norm`: each loss, each step's gradients and parameters, then the
    buffers (a record to compare with assert_same_records)."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=lr)
    record: List[Tensor] = []
    for i in range(micro_batches):
        loss = micro_batch_loss(i)
        (loss / 2).backward()
        record.append(loss.detach())
        if i % 2 == 1:
            torch.nn.utils.clip_grad_norm_(parameters, max_norm)
            record += [p.grad.clone() for p in parameters]
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            record += [p.detach().clone() for p in model.parameters()]
    return record + [b.clone() for b in model.buffers()]


def assert_same_records(reference: List[Tensor], other: List[Tensor], what: str) -> None:
    """Every tensor of two adamw_record records equal, dtype and bits."""
    assert len(reference) == len(other), what
    for i, (a, b) in enumerate(zip(reference, other)):
        assert a.dtype == b.dtype and torch.equal(a, b), \
            f"{what}, record {i}: max difference {(a.double() - b.double()).abs().max()}"


def loss_of(output: Any) -> Tensor:
    """Sum over the output's floating tensors of mean(t^2)."""
    total = None
    for t in tensors_of(output):
        if t.is_floating_point():
            term = t.float().pow(2).mean()
            total = term if total is None else total + term
    if total is None:
        raise ValueError("the output has no floating tensor to make a loss of")
    return total


@dataclass
class Family:
    name: str
    make: Callable[[int], torch.jit.ScriptModule]
    inputs: Tuple[Tensor, ...]
    blocks: int
    loss: Callable[[Any], Tensor] = loss_of
    description: str = ""
    eager: Optional[Callable[[int], nn.Module]] = None  # the unscripted model, for eager-mode peers

    def __repr__(self) -> str:
        return f"Family({self.name}: {self.description}; {self.blocks} blocks)"


def _pick(size: str, test, bench, large=None):
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, not {size!r}")
    if size == "large" and large is None:
        raise ValueError("this family has no 'large' size; use 'test' or 'bench'")
    return {"test": test, "bench": bench, "large": large}[size]


def _family(name: str, build: Callable[[], nn.Module], inputs: Tuple[Tensor, ...], blocks: int, device: str,
            description: str = "") -> Family:
    def eager(seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return build().to(device).train()

    def make(seed: int = 0) -> torch.jit.ScriptModule:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 2.10+: torch.jit.script is deprecated (it still works)
            return torch.jit.script(eager(seed))
    return Family(name, make, tuple(t.to(device) for t in inputs), blocks, loss_of, description, eager)


def _generator(seed: int = 1234) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------
# Transformers


class EncoderClassifier(nn.Module):
    """Input projection, nn.TransformerEncoder with a key padding mask, per-token head."""

    def __init__(self, features: int, d: int, heads: int, layers: int, classes: int, dropout: float):
        super().__init__()
        self.project = nn.Linear(features, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: Tensor, src_key_padding_mask: Tensor) -> Tensor:
        h = self.encoder(self.project(x), src_key_padding_mask=src_key_padding_mask)
        return self.head(self.norm(h))


def transformer_encoder(size: str = "test", device: str = "cpu") -> Family:
    b, t, features, d, heads, layers, classes = _pick(size, (4, 32, 8, 16, 2, 4, 4), (4, 256, 64, 256, 4, 6, 16),
                                                       (8, 1024, 64, 1024, 16, 12, 16))
    g = _generator()
    x = torch.randn(b, t, features, generator=g)
    mask = torch.zeros(b, t, dtype=torch.bool)
    mask[-1, t - t // 4:] = True  # the last sequence is padded at its end
    return _family("transformer_encoder", lambda: EncoderClassifier(features, d, heads, layers, classes, 0.1),
                   (x, mask), layers, device, f"nn.TransformerEncoder, {layers} layers, d {d}, {heads} heads")


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float, additive_mask: bool):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)
        self.heads = heads
        self.additive_mask = additive_mask

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, t, c = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        if self.additive_mask:
            att = att + mask
        else:
            att = att.masked_fill(mask, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_drop(self.proj(y))


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float, additive_mask: bool):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, dropout, additive_mask)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class GPTMaskInput(nn.Module):
    """minGPT-style: learned position embedding parameter sliced to the length; the additive
    causal mask (0 on and below the diagonal, -inf above) comes in with the tokens."""

    def __init__(self, vocab: int, context: int, d: int, heads: int, layers: int, dropout: float):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Parameter(torch.randn(1, context, d) * 0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([GPTBlock(d, heads, dropout, True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: Tensor, mask: Tensor) -> Tensor:
        t = idx.size(1)
        x = self.drop(self.tok_emb(idx) + self.pos_emb[:, :t, :])
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


class GPTMaskBuiltin(nn.Module):
    """nanoGPT-style: position ids from torch.arange, the bool causal mask from torch.triu, both
    built in forward from the input's length."""

    def __init__(self, vocab: int, context: int, d: int, heads: int, layers: int, dropout: float):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([GPTBlock(d, heads, dropout, False) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=idx.device), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def _gpt_sizes(size: str):
    # batch, sequence, vocab, d, heads, layers
    return _pick(size, (4, 32, 32, 16, 2, 4), (4, 256, 512, 256, 4, 12), (8, 1024, 8192, 1024, 16, 12))


def causal_mask(t: int) -> Tensor:
    """Additive causal mask: 0 on and below the diagonal, -inf above."""
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


def gpt_mask_input(size: str = "test", device: str = "cpu") -> Family:
    b, t, vocab, d, heads, layers = _gpt_sizes(size)
    idx = torch.randint(0, vocab, (b, t), generator=_generator())
    return _family("gpt_mask_input", lambda: GPTMaskInput(vocab, t, d, heads, layers, 0.1), (idx, causal_mask(t)),
                   layers, device, f"GPT, {layers} blocks, d {d}, {heads} heads, mask passed in")


def gpt_mask_builtin(size: str = "test", device: str = "cpu") -> Family:
    b, t, vocab, d, heads, layers = _gpt_sizes(size)
    idx = torch.randint(0, vocab, (b, t), generator=_generator())
    return _family("gpt_mask_builtin", lambda: GPTMaskBuiltin(vocab, t, d, heads, layers, 0.1), (idx,),
                   layers, device, f"GPT, {layers} blocks, d {d}, {heads} heads, mask built in forward")


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding, in the half-split layout of Llama's Hugging Face port."""
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LlamaBlock(nn.Module):
    """Pre-RMSNorm block: grouped-query attention with rotary positions, a SwiGLU feed-forward."""

    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        self.attn_norm = RMSNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wkv = nn.Linear(d, 2 * kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.ffn_norm = RMSNorm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        b, t = x.size(0), x.size(1)
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.wkv(h).view(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        repeat = self.heads // self.kv_heads
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = F.softmax(att.masked_fill(mask, float("-inf")).float(), dim=-1).type_as(q)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """A Llama-style decoder: token embedding tied to the output head, rotary tables and the bool
    causal mask built in forward from the input's length."""

    def __init__(self, vocab: int, d: int, heads: int, kv_heads: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([LlamaBlock(d, heads, kv_heads, 8 * d // 3) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.head_dim = d // heads

    def forward(self, idx: Tensor) -> Tensor:
        t = idx.size(1)
        inv = 1.0 / (10000.0 ** (torch.arange(0, self.head_dim, 2, device=idx.device).float() / self.head_dim))
        angles = torch.outer(torch.arange(t, device=idx.device).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=idx.device), diagonal=1)
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, cos, sin, mask)
        return self.head(self.norm(x))


def llama(size: str = "test", device: str = "cpu") -> Family:
    # batch, sequence, vocab, d, heads, kv heads, layers
    b, t, vocab, d, heads, kv_heads, layers = _pick(size, (2, 32, 64, 32, 4, 2, 4), (4, 128, 512, 256, 8, 2, 6),
                                                    (8, 2048, 32000, 1024, 16, 4, 12))
    idx = torch.randint(0, vocab, (b, t), generator=_generator())
    return _family("llama", lambda: Llama(vocab, d, heads, kv_heads, layers), (idx,), layers, device,
                   f"Llama-style, {layers} blocks, d {d}, {heads} heads ({kv_heads} for keys and values)")


class CosineAttentionBlock(nn.Module):
    """Swin V2's attention, over all tokens: a key bias zeroed on a clone of the qkv bias,
    normalized queries and keys scaled by a clamped logit scale, a position bias from an MLP, and
    norms after each residual branch."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))
        self.proj = nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: Tensor, position_bias: Tensor) -> Tensor:
        b, t, d = x.shape
        bias = self.qkv.bias.clone()
        bias[d:2 * d].zero_()
        q, k, v = F.linear(x, self.qkv.weight, bias).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        att = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        att = att * torch.clamp(self.logit_scale, max=math.log(100.0)).exp() + position_bias
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.norm1(self.proj(y))
        return x + self.norm2(self.mlp(x))


class CosineAttention(nn.Module):
    """Swin V2-style blocks over a grid of tokens, the position bias of each pair read from an
    MLP over the table of relative coordinates (a side computation that needs gradients)."""

    def __init__(self, side: int, d: int, heads: int, layers: int, classes: int):
        super().__init__()
        self.embed = nn.Linear(3, d)
        coords = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")).flatten(1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).float() / side
        self.register_buffer("relative", relative)
        self.cpb = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, heads, bias=False))
        self.blocks = nn.ModuleList([CosineAttentionBlock(d, heads) for _ in range(layers)])
        self.head = nn.Linear(d, classes)

    def forward(self, image: Tensor) -> Tensor:
        position_bias = 16 * torch.sigmoid(self.cpb(self.relative).permute(2, 0, 1))
        x = self.embed(image.flatten(2).transpose(1, 2))
        for block in self.blocks:
            x = block(x, position_bias)
        return self.head(x.mean(1))


def cosine_attention(size: str = "test", device: str = "cpu") -> Family:
    b, side, d, heads, layers = _pick(size, (2, 6, 32, 4, 4), (8, 16, 128, 8, 8))  # batch, grid side, d, ...
    image = torch.randn(b, 3, side, side, generator=_generator())
    return _family("cosine_attention", lambda: CosineAttention(side, d, heads, layers, 10), (image,), layers, device,
                   f"Swin V2-style cosine attention, {layers} blocks, d {d}, {heads} heads")


class BertSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.dropout = nn.Dropout(dropout)
        self.heads = heads

    def scores(self, x: Tensor) -> Tensor:
        return x.view(x.size(0), x.size(1), self.heads, x.size(2) // self.heads).permute(0, 2, 1, 3)

    def forward(self, h: Tensor, mask: Tensor) -> Tensor:
        q, k, v = self.scores(self.query(h)), self.scores(self.key(h)), self.scores(self.value(h))
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
        att = self.dropout(F.softmax(att + mask, dim=-1))
        context = torch.matmul(att, v).permute(0, 2, 1, 3).contiguous()
        return context.view(h.size(0), h.size(1), h.size(2))


class BertLayer(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.attention = BertSelfAttention(d, heads, dropout)
        self.attention_out = nn.Linear(d, d)
        self.attention_norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, 4 * d)
        self.output = nn.Linear(4 * d, d)
        self.output_norm = nn.LayerNorm(d, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h: Tensor, mask: Tensor) -> Tensor:
        a = self.attention_norm(h + self.dropout(self.attention_out(self.attention(h, mask))))
        return self.output_norm(a + self.dropout(self.output(F.gelu(self.intermediate(a)))))


class BertEncoder(nn.Module):
    def __init__(self, vocab: int, context: int, d: int, heads: int, layers: int, dropout: float):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.position = nn.Embedding(context, d)
        self.token_type = nn.Embedding(2, d)
        self.embedding_norm = nn.LayerNorm(d, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList([BertLayer(d, heads, dropout) for _ in range(layers)])
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tuple[Tensor, Tensor]:
        t = input_ids.size(1)
        positions = torch.arange(t, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        h = self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))
        h = self.dropout(self.embedding_norm(h))
        mask = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * -10000.0
        for layer in self.layers:
            h = layer(h, mask)
        return h, torch.tanh(self.pooler(h[:, 0]))


def bert_encoder(size: str = "test", device: str = "cpu") -> Family:
    b, t, vocab, d, heads, layers = _pick(size, (4, 32, 32, 16, 2, 3), (8, 128, 1024, 256, 4, 6))
    idx = torch.randint(0, vocab, (b, t), generator=_generator())
    attention_mask = torch.ones(b, t, dtype=torch.long)
    attention_mask[-1, t - t // 4:] = 0
    return _family("bert_encoder", lambda: BertEncoder(vocab, t, d, heads, layers, 0.1), (idx, attention_mask),
                   layers, device, f"BERT encoder, {layers} layers, d {d}, {heads} heads")


class Attention(nn.Module):
    """Multi-head attention of x over a context (x itself for self-attention), additive mask."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)
        self.heads = heads

    def forward(self, x: Tensor, context: Tensor, mask: Tensor) -> Tensor:
        b, t, c, s = x.size(0), x.size(1), x.size(2), context.size(1)
        q = self.q(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k, v = self.kv(context).split(c, dim=2)
        k = k.view(b, s, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, c // self.heads).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads)) + mask
        att = self.drop(F.softmax(att, dim=-1))
        return self.proj(torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, c))


class EncoderBlock(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, mask)
        return x + self.mlp(self.ln2(x))


class DecoderBlock(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = Attention(d, heads, dropout)
        self.cross_attn = Attention(d, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x: Tensor, memory: Tensor, causal: Tensor, memory_mask: Tensor) -> Tensor:
        h = self.ln1(x)
        x = x + self.self_attn(h, h, causal)
        x = x + self.cross_attn(self.ln2(x), memory, memory_mask)
        return x + self.mlp(self.ln3(x))


class EncoderDecoder(nn.Module):
    """A pre-LN encoder-decoder over source and target tokens with a source padding mask: every
    decoder block reads the encoder's output (memory) besides its own stream; the additive masks
    (-inf where padded, and the causal one) are built in forward."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, dropout: float):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, d)
        self.tgt_emb = nn.Embedding(vocab, d)
        self.encoder = nn.ModuleList([EncoderBlock(d, heads, dropout) for _ in range(layers)])
        self.decoder = nn.ModuleList([DecoderBlock(d, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, src: Tensor, tgt: Tensor, src_padding: Tensor) -> Tensor:
        t = tgt.size(1)
        pad = torch.zeros(src_padding.shape, device=src.device).masked_fill(src_padding, float("-inf"))
        pad = pad[:, None, None, :]
        causal = torch.triu(torch.full((t, t), float("-inf"), device=tgt.device), diagonal=1)
        memory = self.src_emb(src)
        for block in self.encoder:
            memory = block(memory, pad)
        x = self.tgt_emb(tgt)
        for block in self.decoder:
            x = block(x, memory, causal, pad)
        return self.head(self.ln_f(x))


def _translation_batch(b: int, t: int, vocab: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Source and target token ids, and the source padding mask: the last source is padded at its
    end."""
    g = _generator()
    src = torch.randint(0, vocab, (b, t), generator=g)
    tgt = torch.randint(0, vocab, (b, t), generator=g)
    src_padding = torch.zeros(b, t, dtype=torch.bool)
    src_padding[-1, t - t // 4:] = True
    return src, tgt, src_padding


def encoder_decoder(size: str = "test", device: str = "cpu") -> Family:
    b, t, vocab, d, heads, layers = _pick(size, (4, 16, 32, 16, 2, 2), (4, 128, 1024, 256, 4, 6))
    return _family("encoder_decoder", lambda: EncoderDecoder(vocab, d, heads, layers, 0.1),
                   _translation_batch(b, t, vocab), 2 * layers, device,
                   f"encoder-decoder, {layers}+{layers} blocks, d {d}, {heads} heads")


class TorchTransformer(nn.Module):
    """PyTorch's own nn.Transformer as a translation model: token embeddings, the causal target
    mask built in forward, source padding masked in the encoder and in cross-attention."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, dropout: float):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, d)
        self.tgt_emb = nn.Embedding(vocab, d)
        self.transformer = nn.Transformer(d, heads, layers, layers, 4 * d, dropout, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, src: Tensor, tgt: Tensor, src_padding: Tensor) -> Tensor:
        t = tgt.size(1)
        causal = torch.triu(torch.full((t, t), float("-inf"), device=tgt.device), diagonal=1)
        x = self.transformer(self.src_emb(src), self.tgt_emb(tgt), tgt_mask=causal,
                             src_key_padding_mask=src_padding, memory_key_padding_mask=src_padding)
        return self.head(x)


def torch_transformer(size: str = "test", device: str = "cpu") -> Family:
    b, t, vocab, d, heads, layers = _pick(size, (4, 16, 32, 16, 2, 3), (4, 128, 1024, 256, 4, 6))
    return _family("torch_transformer", lambda: TorchTransformer(vocab, d, heads, layers, 0.1),
                   _translation_batch(b, t, vocab), 2 * layers, device,
                   f"nn.Transformer, {layers}+{layers} layers, d {d}, {heads} heads")


# --------------------------------------------------------------------------------------------
# CNNs


def conv_bn_relu(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True))


class TwoInput(nn.Module):
    """An image branch of convolutions and a vector input (tabular features), fused at the end."""

    def __init__(self, width: int, convs: int, vector: int, classes: int, dropout: float):
        super().__init__()
        layers = []
        c = 3
        for i in range(convs):
            w = width * (2 ** (i // 3))
            layers.append(conv_bn_relu(c, w, stride=2 if i in (2, 5) else 1))
            c = w
        self.branch = nn.Sequential(*layers)
        self.vector = nn.Sequential(nn.Linear(vector, 2 * width), nn.ReLU(), nn.Dropout(dropout))
        self.fuse = nn.Sequential(nn.Dropout(dropout), nn.Linear(c + 2 * width, classes))
        self.aux = nn.Linear(c, classes)

    def forward(self, image: Tensor, vector: Tensor) -> Tuple[Tensor, Tensor]:
        f = self.branch(image).mean(dim=[2, 3])
        v = self.vector(vector)
        return self.fuse(torch.cat([f, v], dim=1)), self.aux(f)


def two_input(size: str = "test", device: str = "cpu") -> Family:
    b, image, width, vector, convs = _pick(size, (4, 32, 4, 6, 8), (8, 128, 32, 32, 8))
    g = _generator()
    inputs = (torch.randn(b, 3, image, image, generator=g), torch.randn(b, vector, generator=g))
    return _family("two_input", lambda: TwoInput(width, convs, vector, 5, 0.2), inputs, convs, device,
                   f"{convs} convs on {image}x{image} images plus a {vector}-vector")


class DoubleConv(nn.Sequential):
    def __init__(self, c_in: int, c_out: int):
        super().__init__(conv_bn_relu(c_in, c_out), conv_bn_relu(c_out, c_out))


class Down(nn.Sequential):
    def __init__(self, c_in: int, c_out: int):
        super().__init__(nn.MaxPool2d(2), DoubleConv(c_in, c_out))


class Up(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(c_in, c_in // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(c_in, c_out)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    """The usual 4-level U-Net (as in the widely used Pytorch-UNet): 9 double-conv blocks, each
    decoder block reading the encoder output of its level through a long skip."""

    def __init__(self, channels: int, classes: int, width: int, dropout: float):
        super().__init__()
        w = width
        self.inc = DoubleConv(channels, w)
        self.down1 = Down(w, 2 * w)
        self.down2 = Down(2 * w, 4 * w)
        self.down3 = Down(4 * w, 8 * w)
        self.down4 = Down(8 * w, 16 * w)
        self.drop = nn.Dropout2d(dropout)  # at the end of the contracting path, as in the U-Net paper
        self.up1 = Up(16 * w, 8 * w)
        self.up2 = Up(8 * w, 4 * w)
        self.up3 = Up(4 * w, 2 * w)
        self.up4 = Up(2 * w, w)
        self.outc = nn.Conv2d(w, classes, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x5 = self.drop(self.down4(x4))
        x = self.up1(x5, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        return self.outc(x)


def unet(size: str = "test", device: str = "cpu") -> Family:
    b, image, width = _pick(size, (1, 64, 2), (2, 128, 32))
    x = torch.randn(b, 3, image, image, generator=_generator())
    return _family("unet", lambda: UNet(3, 2, width, 0.1), (x,), 9, device,
                   f"U-Net, 4 levels, width {width}, {image}x{image}")


def densenet121(size: str = "test", device: str = "cpu") -> Family:
    import torchvision

    b, image = _pick(size, (2, 32), (4, 96))
    x = torch.randn(b, 3, image, image, generator=_generator())
    # 58 dense layers (6 + 12 + 24 + 16) and the 3 transitions between the dense blocks. Inside a
    # dense block the feature list is live across every cut: the boundaries carry its tensors.
    return _family("densenet121", lambda: torchvision.models.densenet121(memory_efficient=False), (x,), 61, device,
                   f"torchvision DenseNet-121, {image}x{image}")


class InceptionBlock(nn.Module):
    """Four branches over one input, concatenated (GoogLeNet / Inception v3's Mixed blocks): cut
    between branches, the block input and the finished branches pass through every stage."""

    def __init__(self, c_in: int, width: int):
        super().__init__()
        self.branch1x1 = conv_bn_relu(c_in, width)
        self.branch3x3 = nn.Sequential(conv_bn_relu(c_in, width // 2), conv_bn_relu(width // 2, width))
        self.branch3x3dbl = nn.Sequential(conv_bn_relu(c_in, width // 2), conv_bn_relu(width // 2, width),
                                          conv_bn_relu(width, width))
        self.branch_pool = nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), conv_bn_relu(c_in, width))

    def forward(self, x: Tensor) -> Tensor:
        b1 = self.branch1x1(x)
        b2 = self.branch3x3(x)
        b3 = self.branch3x3dbl(x)
        b4 = self.branch_pool(x)
        return torch.cat([b1, b2, b3, b4], dim=1)


class InceptionStyle(nn.Module):
    def __init__(self, width: int, blocks: int, classes: int, dropout: float):
        super().__init__()
        self.stem = conv_bn_relu(3, width)
        self.blocks = nn.Sequential(*[InceptionBlock(width if i == 0 else 4 * width, width) for i in range(blocks)])
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self.blocks(self.stem(x)).mean(dim=[2, 3])))


def inception(size: str = "test", device: str = "cpu") -> Family:
    b, image, width, blocks = _pick(size, (2, 24, 8, 3), (8, 64, 32, 4))
    x = torch.randn(b, 3, image, image, generator=_generator())
    return _family("inception", lambda: InceptionStyle(width, blocks, 10, 0.2), (x,), blocks, device,
                   f"{blocks} Inception blocks of 4 branches, width {width}, {image}x{image}")


class DictOutput(nn.Module):
    def __init__(self, width: int, convs: int, classes: int, dropout: float):
        super().__init__()
        layers = [conv_bn_relu(3, width)]
        layers += [conv_bn_relu(width, width, stride=2 if i == convs // 2 else 1) for i in range(1, convs)]
        self.features = nn.Sequential(*layers)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(width, classes)

    def forward(self, x: Tensor) -> Dict[str, Tensor]:
        features = self.features(x).mean(dim=[2, 3])
        return {"logits": self.head(self.drop(features)), "features": features}


def dict_output(size: str = "test", device: str = "cpu") -> Family:
    b, image, width, convs = _pick(size, (2, 16, 8, 6), (8, 128, 64, 8))
    x = torch.randn(b, 3, image, image, generator=_generator())
    return _family("dict_output", lambda: DictOutput(width, convs, 10, 0.2), (x,), convs, device,
                   f"{convs} convs returning a dict")


class SpectralNormConv(nn.Module):
    """A convolution whose weight is divided by its spectral norm, estimated by one power
    iteration per training call on a vector kept as a buffer (torch.nn.utils.spectral_norm, in a
    form TorchScript compiles): forward reads the buffer, then writes it in place."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, stride, 1)
        self.register_buffer("u", F.normalize(torch.randn(c_out), dim=0))

    def forward(self, x: Tensor) -> Tensor:
        w = self.conv.weight.reshape(self.conv.weight.shape[0], -1)
        v = F.normalize(torch.mv(w.detach().t(), self.u), dim=0)
        if self.training:
            self.u.copy_(F.normalize(torch.mv(w.detach(), v), dim=0))
        sigma = torch.dot(self.u, torch.mv(w, v))
        return F.leaky_relu(F.conv2d(x, self.conv.weight / sigma, self.conv.bias, self.conv.stride, 1), 0.2)


class SpectralNormCritic(nn.Module):
    """A GAN critic of spectral-norm convolutions, with a training-call counter buffer that the
    middle block increments and every later block reads: recomputing a block must read each buffer as
    that block's first run did."""

    def __init__(self, width: int, convs: int):
        super().__init__()
        self.blocks = nn.ModuleList([SpectralNormConv(3 if i == 0 else width, width, 2 if i == convs // 2 else 1)
                                     for i in range(convs)])
        self.register_buffer("calls", torch.zeros(1))
        self.head = nn.Linear(width, 1)

    def forward(self, x: Tensor) -> Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i == len(self.blocks) // 2:
                if self.training:
                    self.calls.add_(1)
            elif i > len(self.blocks) // 2:
                x = x * (1 + 1 / (1 + self.calls))
        return self.head(x.mean(dim=[2, 3]))


def spectral_norm(size: str = "test", device: str = "cpu") -> Family:
    b, image, width, convs = _pick(size, (2, 16, 8, 6), (16, 128, 64, 8))
    x = torch.randn(b, 3, image, image, generator=_generator())
    return _family("spectral_norm", lambda: SpectralNormCritic(width, convs), (x,), convs, device,
                   f"{convs} spectral-norm convs with buffers read and written in forward")


class FeaturePyramid(nn.Module):
    """A backbone that returns the feature map of every stage, collected by append (what a feature
    pyramid or a detection head reads): the list is live from the first stage to the return."""

    def __init__(self, width: int, levels: int, convs: int):
        super().__init__()
        self.stem = conv_bn_relu(3, width)
        self.levels = nn.ModuleList([
            nn.Sequential(conv_bn_relu(width, width, stride=2), *[conv_bn_relu(width, width) for _ in range(convs - 1)])
            for _ in range(levels)])

    def forward(self, x: Tensor) -> List[Tensor]:
        features: List[Tensor] = []
        x = self.stem(x)
        for level in self.levels:
            x = level(x)
            features.append(x)
        return features


def list_output(size: str = "test", device: str = "cpu") -> Family:
    b, image, width, levels = _pick(size, (2, 32, 8, 3), (8, 256, 32, 4))
    x = torch.randn(b, 3, image, image, generator=_generator())
    return _family("list_output", lambda: FeaturePyramid(width, levels, 2), (x,), levels, device,
                   f"{levels} levels of 2 convs returning every level's features in a list")


# --------------------------------------------------------------------------------------------
# Recurrent


class LSTMStack(nn.Module):
    """Embedding, a stack of single-layer nn.LSTM modules with dropout between, per-token head."""

    def __init__(self, vocab: int, d: int, layers: int, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList([nn.LSTM(d, d, batch_first=True) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.drop(self.embed(idx))
        for lstm in self.layers:
            y, _ = lstm(x)
            x = self.drop(y)
        return self.head(x)


class GRUStack(nn.Module):
    """Embedding, a stack of two-layer nn.GRU modules, per-token head. The GRU kernel draws the
    dropout mask between its two layers itself, and is the family's only random op."""

    def __init__(self, vocab: int, d: int, layers: int, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([nn.GRU(d, d, num_layers=2, dropout=dropout, batch_first=True)
                                     for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.embed(idx)
        for gru in self.layers:
            x, _ = gru(x)
        return self.head(x)


def _recurrent_sizes(size: str):
    return _pick(size, (8, 24, 32, 16, 3), (8, 128, 1000, 256, 3))  # batch, sequence, vocab, d, layers


def lstm_stack(size: str = "test", device: str = "cpu") -> Family:
    b, t, vocab, d, layers = _recurrent_sizes(size)
    idx = torch.randint(0, vocab, (b, t), generator=_generator())
    return _family("lstm_stack", lambda: LSTMStack(vocab, d, layers, 0.2), (idx,), layers, device,
                   f"{layers} nn.LSTM layers, hidden {d}")


def gru(size: str = "test", device: str = "cpu") -> Family:
    b, t, vocab, d, layers = _recurrent_sizes(size)
    idx = torch.randint(0, vocab, (b, t), generator=_generator())
    return _family("gru", lambda: GRUStack(vocab, d, layers, 0.2), (idx,), layers, device,
                   f"{layers} two-layer nn.GRU modules, hidden {d}")


FAMILIES: Dict[str, Callable[..., Family]] = {
    "transformer_encoder": transformer_encoder,
    "gpt_mask_input": gpt_mask_input,
    "gpt_mask_builtin": gpt_mask_builtin,
    "bert_encoder": bert_encoder,
    "encoder_decoder": encoder_decoder,
    "torch_transformer": torch_transformer,
    "two_input": two_input,
    "unet": unet,
    "densenet121": densenet121,
    "inception": inception,
    "lstm_stack": lstm_stack,
    "gru": gru,
    "dict_output": dict_output,
    "list_output": list_output,
    "spectral_norm": spectral_norm,
    "llama": llama,
    "cosine_attention": cosine_attention,
}
