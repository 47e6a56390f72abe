"""Random scriptable PyTorch models made of the pieces of real architectures, for jitckpt's fuzzer.

    draw(seed) -> spec     a JSON-serializable dict (the same seed, the same spec)
    render(spec) -> str    source of a module (imports torch, typing, math) defining `class Model` (no
                           constructor arguments) and `make_inputs(generator) -> Tuple[Tensor, ...]`
    load(spec, directory) -> module    render() written to directory/fuzz_model_<hash>.py and imported
    shrink(spec) -> strictly smaller valid specs, most aggressive first;  summary(spec) -> one line

A model is a stem, a chain of blocks over one kind of data (image, signal, volume, tokens, seq, vector;
a "switch" block, or an adapter where a block's kind differs from the data's, changes kind) and a head.
For the fuzzer: parameters whose name holds "unused" get no gradient (spec "unused"); blocks with
ema "no_grad" write a buffer in `with torch.no_grad():`, which jitckpt refuses; spec "tied"/"shared"
mark a weight read twice (last-bit differences under autocast are expected there). Run references
under torch.jit.optimized_execution(False), as jitckpt defines the unmodified model, and on Debian's
PyTorch 2.6 with torch.backends.mkldnn.enabled = False (its oneDNN conv backward gives NaN now and then).
`python3 generate.py FIRST LAST [--shrink] [--optimized] [--no-mkldnn]` checks seeds FIRST..LAST-1.
"""
import hashlib
import importlib.util
import json
import math
import os
import random
import sys
import types
from typing import Dict, Iterator, List

Spec = dict
DIMS = {"signal": 1, "image": 2, "volume": 3}
ACTS = ["relu", "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"]
BLOCKS = {"spatial": ["conv"] * 3 + ["inverted", "pool", "up", "split", "dense", "convnext"],
          "seq": ["attn"] * 3 + ["ffn"] * 2 + ["rnn", "convmod"], "vector": ["mlp"] * 3 + ["mixer"]}
SWITCHES = {"image": ["seq", "vector", "signal"], "signal": ["seq", "vector"], "volume": ["seq", "vector", "image"],
            "seq": ["vector", "signal", "image"], "vector": ["seq", "image", "signal"]}
SWITCH_HOW = {"seq": ["patch", "flat", "transpose"],
              "vector": ["mean", "flatten", "first", "max", "attnpool", "masked"]}
# shrink moves a flag to its simplest value; extras are removed
SIMPLE = {"stride": False, "groups": "1", "pad": True, "norm": "none", "act": "relu", "res": False, "inplace": False,
          "cl": False, "se": False, "shuffle": "cat", "causal": False, "mask": False, "fused": False, "heads": 1,
          "layers": 1, "bidir": False, "post": False, "adrop": 0.0, "expand": 2, "ratio": 2, "variant": 0,
          "mha": False}
EXTRAS = ("skip", "drop", "count", "ema", "gate", "collect", "inline", "risky", "fn")
RMSNORM = '''class RMSNorm(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
'''

# torch.autograd.Functions with backwards of their own, applied from functions TorchScript ignores
# (a Python call there; one op of jitckpt's through export): gradient scaling, and a mask drawn
# inside, which a recomputed stage must draw again.
FUNCTIONS = '''class HalveGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.5


class DropOwnMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        mask = (torch.rand_like(x) > p).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask, None


@torch.jit.ignore
def halve_gradient(x: torch.Tensor) -> torch.Tensor:
    return HalveGradient.apply(x)


@torch.jit.ignore
def drop_own_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    return DropOwnMask.apply(x, p)
'''
HELPERS = {"RMSNorm": RMSNORM, "Functions": FUNCTIONS}


def group(kind: str) -> str:
    return "spatial" if kind in DIMS else kind


class Code:
    """The __init__ and forward lines of one block (or of Model), attributes prefixed by p."""

    def __init__(self, p: str = "", exact: bool = True):
        self.p, self.exact = p, exact
        self.init: List[str] = []
        self.fwd: List[str] = []
        self.ann: List[str] = []
        self.args: List[str] = []
        self.helpers = set()

    def __call__(self, *lines: str):
        self.fwd.extend(lines)

    def mod(self, name: str, ctor: str) -> str:
        self.init.append(f"self.{self.p}{name} = {ctor}")
        return f"self.{self.p}{name}"

    def merge(self, other: "Code"):
        for a in ("init", "fwd", "ann"):
            getattr(self, a).extend(getattr(other, a))
        self.args += [a for a in other.args if a not in self.args]
        self.helpers |= other.helpers


def conv(n, cin, cout, k, stride=1, pad=0, groups=1, bias=True, t=""):
    return f"torch.nn.Conv{t}{n}d({cin}, {cout}, {k}, stride={stride}, padding={pad}, groups={groups}, bias={bias})"


def lin(cin, cout, bias=True):
    return f"torch.nn.Linear({cin}, {cout}, bias={bias})"


def par(v: str) -> str:
    return f"({v})" if " " in v else v


def norm(c: Code, name: str, kind: str, ch: int, which: str):
    """Registers a norm over channels (spatial) or the last dim; returns var -> expression. LayerNorm
    and GroupNorm read a float32 input (as CLIP's and Whisper's do): 1.13 has no bf16-input kernel."""
    n = DIMS.get(kind)
    if which == "none":
        return lambda v: v
    if n:
        g = 1 if which == "ln" else next(d for d in (4, 2, 1) if ch % d == 0)
        m = c.mod(name, f"torch.nn.BatchNorm{n}d({ch})" if which == "bn" else f"torch.nn.GroupNorm({g}, {ch})")
        return lambda v: f"{m}({v})" if which == "bn" else f"{m}({par(v)}.float())"
    if which == "bn":
        m = c.mod(name, f"torch.nn.BatchNorm1d({ch})")
        if kind == "seq":
            return lambda v: f"{m}({par(v)}.transpose(1, 2)).transpose(1, 2)"
        return lambda v: f"{m}({v})"
    if which == "rms":
        c.helpers.add("RMSNorm")
    m = c.mod(name, f"RMSNorm({ch})" if which == "rms" else f"torch.nn.LayerNorm({ch})")
    return lambda v: f"{m}({v})" if which == "rms" else f"{m}({par(v)}.float())"


def act(c: Code, name: str, v: str, inplace=False, exact=None):
    """An activation of v in place of v; exact GELU only where c.exact (1.13's exact GELU backward is
    nondeterministic when its incoming gradient is transposed)."""
    if name == "gelu" and not (c.exact if exact is None else exact):
        name = "gelu_tanh"
    if inplace and name == "relu":
        forms = {"method": f"{v}.relu_()", "torch": f"{v} = torch.relu_({v})"}
        c(forms.get(inplace, f"{v} = F.relu({v}, inplace=True)"))
    elif inplace and name == "silu":
        c(f"{v} = F.silu({v}, inplace=True)")
    else:
        c(f"{v} = " + {"relu": f"F.relu({v})", "gelu": f"F.gelu({v})", "gelu_tanh": f'F.gelu({v}, approximate="tanh")',
                       "silu": f"F.silu({v})", "tanh": f"torch.tanh({v})", "sigmoid": f"torch.sigmoid({v})"}[name])


def shape_of(st) -> str:  # the broadcast shape of a per-channel vector
    n = DIMS.get(st["kind"])
    return f".view(1, {st['c']}{', 1' * n})" if n else ""


def down(n: int, v: str, s: int, q: int, how="mean") -> str:
    """v pooled from size s to q; volumes without 1.13's 3-d pooling ops (no bf16 kernels)."""
    if n < 3:
        return f"F.adaptive_{'max' if how == 'max' else 'avg'}_pool{n}d({v}, {q})"
    if q == 1 or s % q:
        return f"{v}.mean([2, 3, 4], keepdim=True)" if q == 1 else f"F.interpolate({v}, size={[q] * 3})"
    r = f"{q}, {s // q}"
    return f"{v}.reshape({v}.size(0), {v}.size(1), {r}, {r}, {r}).{'amax' if how == 'max' else 'mean'}([3, 5, 7])"


def mean_dims(st, batch=False) -> str:
    n = DIMS.get(st["kind"])
    dims = list(range(2, n + 2)) if n else [1] if st["kind"] == "seq" else []
    return str(([0] if batch else []) + dims)


# ---------------------------------------------------------------- spatial blocks: (N, C, *spatial)

def r_conv(b, st, c):
    n, ch, s = DIMS[st["kind"]], st["c"], st["s"]
    o, k, g, glu = min(b["out"], 8 if n == 3 else 16), b["k"], 1, b["act"] == "glu"
    if b["groups"] == "depthwise":
        o, g = ch, ch
    elif b["groups"] == "grouped":
        g = next(d for d in (4, 2, 1) if ch % d == 0 and o % d == 0)
    stride = 2 if b["stride"] and s >= 8 else 1
    pad = k // 2 if b["pad"] or s - k + 1 < 4 else 0
    cl = b["cl"] and n == 2
    m = c.mod("conv", conv(n, ch, 2 * o if glu else o, k, stride, pad, g, b["bias"]))
    c(f"h = {m}(x{'.to(memory_format=torch.channels_last)' if cl else ''})")
    c(f"h = {norm(c, 'norm', st['kind'], 2 * o if glu else o, b['norm'])('h')}")
    if glu:
        c("h = F.glu(h, 1)")
    so = (s + 2 * pad - k) // stride + 1
    if b["res"] and o == ch and so == s:
        c("h.add_(x)" if b["inplace"] else "h = h + x")
    if not glu:
        act(c, b["act"], "h", b["inplace"])
    c("x = h.contiguous()" if cl else "x = h")
    return dict(st, c=o, s=so)


def r_inverted(b, st, c):  # MobileNetV2 / EfficientNet: expand, depthwise, squeeze-excite, project
    n, ch, s, kind = DIMS[st["kind"]], st["c"], st["s"], st["kind"]
    e, stride = min(ch * b["expand"], 32), 2 if b["stride"] and s >= 8 else 1
    c(f"h = {norm(c, 'n1', kind, e, b['norm'])(c.mod('expand', conv(n, ch, e, 1, bias=False)) + '(x)')}")
    act(c, b["act"], "h", b["inplace"])
    c(f"h = {norm(c, 'n2', kind, e, b['norm'])(c.mod('dw', conv(n, e, e, 3, stride, 1, e, False)) + '(h)')}")
    act(c, b["act"], "h", b["inplace"])
    if b["se"]:
        s1, s2 = c.mod("se1", conv(n, e, max(e // 4, 2), 1)), c.mod("se2", conv(n, max(e // 4, 2), e, 1))
        c(f"a = {down(n, 'h', 0, 1)}", f"a = torch.sigmoid({s2}(F.relu({s1}(a))))", "h = h * a")
    c(f"h = {norm(c, 'n3', kind, ch, b['norm'])(c.mod('project', conv(n, e, ch, 1, bias=False)) + '(h)')}")
    c("x = x + h" if b["res"] and stride == 1 else "x = h")
    return dict(st, s=(s - 1) // stride + 1)


def r_pool(b, st, c):
    n, s = DIMS[st["kind"]], st["s"]
    if s < 8 or (n == 3 and s % 2):
        return st
    if n == 3:
        c(f"x = {down(n, 'x', s, s // 2, b['how'])}")
        return dict(st, s=s // 2)
    if b["how"] == "module":
        c(f"x = {c.mod('pool', f'torch.nn.MaxPool{n}d(3, 2, 1)')}(x)")
        return dict(st, s=(s - 1) // 2 + 1)
    c({"max": f"x = F.max_pool{n}d(x, 2)", "avg": f"x = F.avg_pool{n}d(x, 2)",
       "adaptive": f"x = F.adaptive_avg_pool{n}d(x, {s // 2})",
       "adaptive_max": f"x = F.adaptive_max_pool{n}d(x, {s // 2})"}[b["how"]])
    return dict(st, s=s // 2)


def r_up(b, st, c):
    n, ch, s = DIMS[st["kind"]], st["c"], st["s"]
    if s * 2 > (8 if n == 3 else 16):
        return st
    if b["how"] == "nearest":
        c('x = F.interpolate(x, scale_factor=2.0, mode="nearest")')
        return dict(st, s=2 * s)
    o = min(b["out"], 8 if n == 3 else 16)
    c(f"x = {norm(c, 'norm', st['kind'], o, b['norm'])(c.mod('up', conv(n, ch, o, 2, 2, t='Transpose')) + '(x)')}")
    act(c, b["act"], "x", b["inplace"])
    return dict(st, c=o, s=2 * s)


def r_split(b, st, c):  # ShuffleNetV2 unit: half the channels through a branch, then cat / stack / shuffle
    n, ch, kind = DIMS[st["kind"]], st["c"], st["kind"]
    if ch % 2:
        return st
    hc = ch // 2
    c("xa, xb = x.chunk(2, dim=1)")
    c(f"h = {norm(c, 'n1', kind, hc, b['norm'])(c.mod('pw1', conv(n, hc, hc, 1, bias=False)) + '(xb)')}")
    act(c, b["act"], "h", b["inplace"])
    c(f"h = {norm(c, 'n2', kind, hc, b['norm'])(c.mod('dw', conv(n, hc, hc, 3, 1, 1, hc, False)) + '(h)')}")
    c(f"h = {norm(c, 'n3', kind, hc, b['norm'])(c.mod('pw2', conv(n, hc, hc, 1, bias=False)) + '(h)')}")
    act(c, b["act"], "h", b["inplace"])
    shuffle = f"y = torch.cat([xa, h], 1)\nx = y.view(y.size(0), 2, {hc}, -1).transpose(1, 2).reshape(y.size())"
    c({"stack": "x = torch.stack([xa, h], dim=2).flatten(1, 2)", "cat": "x = torch.cat([xa, h], 1)",
       "view": shuffle}[b["shuffle"]])
    return st


def r_dense(b, st, c):  # DenseNet layer: pre-activation conv, concatenated; a 1x1 transition past 24 channels
    n, ch, kind = DIMS[st["kind"]], st["c"], st["kind"]
    g = b["out"] // 2
    c(f"h = {norm(c, 'norm', kind, ch, b['norm'])('x')}")
    act(c, b["act"], "h", b["inplace"] and b["norm"] != "none")
    c(f"x = torch.cat([x, {c.mod('conv', conv(n, ch, g, 3, 1, 1, bias=False))}(h)], 1)")
    if ch + g <= 24:
        return dict(st, c=ch + g)
    c(f"x = {c.mod('transition', conv(n, ch + g, 16, 1))}(x)")
    return dict(st, c=16)


def r_convnext(b, st, c):  # depthwise conv, channels-last LayerNorm and MLP, layer scale, residual
    n, ch = DIMS[st["kind"]], st["c"]
    perm, back = [0] + list(range(2, n + 2)) + [1], [0, n + 1] + list(range(1, n + 1))
    e = min(4 * ch, 32)
    c(f"h = {c.mod('dw', conv(n, ch, ch, 3, 1, 1, ch))}(x).permute({perm})")
    c(f"h = {c.mod('l1', lin(ch, e))}({norm(c, 'norm', 'seq', ch, 'rms' if b['norm'] == 'gn' else 'ln')('h')})")
    act(c, b["act"], "h", exact=True)  # between two Linears in one layout
    c(f"h = {c.mod('l2', lin(e, ch))}(h) * {c.mod('gamma', f'torch.nn.Parameter(torch.full([{ch}], 0.1))')}")
    c(f"x = x + h.permute({back})")
    return st


# ---------------------------------------------------------------- sequence blocks: (N, T, D)

def r_attn(b, st, c):  # hand-written multi-head attention, causal mask built here, padding mask given
    D, H = st["c"], b["heads"]
    while H > 1 and (D % H or D // H < 2):
        H //= 2
    dh = D // H
    nrm = norm(c, "norm", "seq", D, b["norm"])
    c(f"h = {nrm('x') if not b['post'] else 'x'}")
    if b.get("mha"):  # nn.MultiheadAttention (SDPA on 2.x) with a float causal mask Model made once
        mask = f"fmask{st['s']}"
        c.args.append(mask)
        # (with bias=False, 1.13 cannot script it)
        mha = c.mod("mha", f"torch.nn.MultiheadAttention({D}, {H}, dropout={b['adrop']}, batch_first=True)")
        c(f"y = {mha}(h, h, h, attn_mask={mask}, need_weights=False)[0]")
        c(f"x = {nrm('x + y')}" if b["post"] else "x = x + y" if b["res"] else "x = y")
        return st
    if b["fused"]:
        c(f"q, k, v = {c.mod('qkv', lin(D, 3 * D, b['bias']))}(h).chunk(3, dim=-1)")
        split = f".reshape(x.size(0), x.size(1), {H}, {dh}).transpose(1, 2)"
    else:
        c(*[f"{v} = {c.mod(v, lin(D, D, b['bias']))}(h)" for v in "qkv"])
        split = (f".view(x.size(0), -1, {H}, {dh}).permute(0, 2, 1, 3)" if b["variant"]
                 else f".view(x.size(0), x.size(1), {H}, {dh}).transpose(1, 2)")
    c(f"q = q{split}", f"k = k{split}", f"v = v{split}")
    scale = f"/ math.sqrt({dh})" if b["variant"] else f"* {dh ** -0.5!r}"
    c(f"s = torch.matmul(q, k.transpose(-2, -1)) {scale}")
    if b["mask"] and st.get("mask"):  # in place only on matmul's output: 1.13's autodiff refuses it on others
        c.args.append("mask")
        c('s.masked_fill_(mask.unsqueeze(1).unsqueeze(2), float("-inf"))' if b["inplace"]
          else 's = s.masked_fill(mask[:, None, None, :], float("-inf"))')
    if b["causal"] and b["variant"]:
        c('s = s + torch.full([x.size(1), x.size(1)], float("-inf"), device=x.device).triu(1)')
    elif b["causal"]:
        c("cm = torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device).triu(1)",
          's = s.masked_fill(cm, float("-inf"))')
    c("a = F.softmax(s, dim=-1)")
    if b["adrop"]:
        c(f"a = F.dropout(a, {b['adrop']}, self.training)")
    merge = f".contiguous().view(x.size(0), x.size(1), {D})" if b["variant"] else f".reshape(x.size(0), x.size(1), {D})"
    c(f"y = {c.mod('o', lin(D, D, b['bias']))}(torch.matmul(a, v).transpose(1, 2){merge})")
    c(f"x = {nrm('x + y')}" if b["post"] else "x = x + y" if b["res"] else "x = y")
    return st


def r_ffn(b, st, c):  # MLP, GLU or SwiGLU feed-forward
    D = st["c"]
    e = min(D * b["ratio"], 32)
    nrm = norm(c, "norm", "seq", D, b["norm"])
    c(f"h = {'x' if b['post'] else nrm('x')}")
    if b["how"] == "swiglu":
        c(f"h = F.silu({c.mod('w1', lin(D, e, False))}(h)) * {c.mod('w3', lin(D, e, False))}(h)")
        c(f"h = {c.mod('w2', lin(e, D, b['bias']))}(h)")
    else:
        hidden(c, b, ("w1", "w2"), D, e, D, glu=b["how"] == "glu")
    c(f"x = {nrm('x + h')}" if b["post"] else "x = x + h" if b["res"] else "x = h")
    return st


def hidden(c, b, names, d_in, e, d_out, glu):
    """h -> Linear to e (GLU halves 2e, else the block's activation) -> Linear to d_out."""
    if glu:
        c(f"h = F.glu({c.mod(names[0], lin(d_in, 2 * e))}(h), -1)")
    else:
        c(f"h = {c.mod(names[0], lin(d_in, e, b['bias']))}(h)")
        act(c, b["act"], "h", exact=True)
    c(f"h = {c.mod(names[1], lin(e, d_out, b['bias']))}(h)")


def r_rnn(b, st, c):
    D, L = st["c"], b["layers"]
    bid = b["bidir"] and D % 2 == 0 and D >= 8
    m = c.mod("rnn", f"torch.nn.{b['how']}({D}, {D // 2 if bid else D}, num_layers={L}, batch_first=True, "
                     f"bidirectional={bid}, dropout={b['adrop'] if L > 1 else 0.0})")
    c(f"h = {m}({norm(c, 'norm', 'seq', D, b['norm'])('x')})[0]")
    c("x = x + h" if b["res"] else "x = h")
    return st


def r_convmod(b, st, c):  # Conformer convolution module over (N, D, T)
    D = st["c"]
    c(f"h = {norm(c, 'norm', 'seq', D, 'ln')('x')}.transpose(1, 2)")
    c(f"h = F.glu({c.mod('pw1', conv(1, D, 2 * D, 1))}(h), dim=1)")
    dw = c.mod("dw", conv(1, D, D, 3, 1, 0 if b["causal"] else 1, D))
    c(f"h = {dw}(F.pad(h, [2, 0]))" if b["causal"] else f"h = {dw}(h)")
    c(f"h = {norm(c, 'bn', 'signal', D, 'bn' if b['norm'] == 'bn' else 'gn')('h')}")
    act(c, b["act"], "h", b["inplace"])
    c(f"x = x + {c.mod('pw2', conv(1, D, D, 1))}(h).transpose(1, 2)")
    return st


# ---------------------------------------------------------------- vector blocks: (N, D)

def r_mlp(b, st, c):
    D, o = st["c"], b["out"]
    e = min(2 * max(D, o), 32)
    c(f"h = {norm(c, 'norm', 'vector', D, b['norm'])('x')}")
    hidden(c, b, ("l1", "l2"), D, e, o, glu=b["act"] == "glu")
    c("x = x + h" if b["res"] and o == D else "x = h")
    return dict(st, c=o)


def r_mixer(b, st, c):  # the vector as (N, g, D/g) groups mixed by a Linear across groups
    D, g = st["c"], b["heads"]
    if D % g or D // g < 2:
        return st
    c(f"h = {c.mod('mix', lin(g, g))}(x.reshape(x.size(0), {g}, {D // g}).transpose(1, 2))")
    act(c, b["act"], "h", exact=False)  # transposed just after
    c(f"x = x + h.transpose(1, 2).reshape(x.size(0), {D})")
    return st


# ---------------------------------------------------------------- changes of kind

def r_switch(b, st, c, to):
    k0, ch, s, how = st["kind"], st["c"], st["s"], b.get("how", "auto")
    n0, n1, D = DIMS.get(k0), DIMS.get(to), b.get("out", ch)
    base = {"c": ch, "s": s, "kind": to}
    if k0 == to:
        return st
    if n0 and to == "seq":
        if k0 == "signal" and how == "transpose":
            c("x = x.transpose(1, 2)")
            return base
        if how == "patch":
            p = next(p for p in (1, 2, 4, 8) if (s // p) ** n0 <= 16)
            c(f"x = {c.mod('patch', conv(n0, ch, D, p, p))}(x).flatten(2).transpose(1, 2)")
            return dict(base, c=D, s=(s // p) ** n0)
        q = next(q for q in (4, 3, 2, 1) if q ** n0 <= 16 and q <= s)
        if q < s:
            c(f"x = {down(n0, 'x', s, q)}")
        c(f"x = {c.mod('proj', lin(ch, D))}(x.flatten(2).transpose(1, 2))")
        return dict(base, c=D, s=q ** n0)
    if n0 and to == "vector":
        if how == "flatten" and ch * s ** n0 <= 256:
            c(f"x = {c.mod('proj', lin(ch * s ** n0, D))}(x.flatten(1))")
            return dict(base, c=D, s=0)
        c(f"x = x.mean({mean_dims(st)})" if how in ("mean", "auto") else f"x = {down(n0, 'x', s, 1)}.flatten(1)")
        return dict(base, s=0)
    if k0 == "image" and to == "signal" and s * s <= 64:
        c("x = x.flatten(2)")
        return dict(base, s=s * s)
    if k0 == "volume" and to == "image":
        c("x = x.mean(2)")
        return base
    if k0 == "seq" and to == "signal":
        c("x = x.transpose(1, 2)")
        return base
    if k0 == "seq" and to == "image" and math.isqrt(s) ** 2 == s:
        c(f"x = x.transpose(1, 2).reshape(x.size(0), {ch}, {math.isqrt(s)}, {math.isqrt(s)})")
        return dict(base, s=math.isqrt(s))
    if k0 == "seq" and to == "vector":
        if how == "masked" and st.get("mask"):
            c.args.append("mask")
            c("w = (~mask).unsqueeze(-1).to(x.dtype)", "x = (x * w).sum(1) / w.sum(1)")
        elif how == "attnpool":
            c(f"w = F.softmax({c.mod('score', lin(ch, 1))}(x), dim=1)", "x = (w * x).sum(1)")
        else:
            c({"first": "x = x[:, 0]", "max": "x = torch.max(x, 1)[0]"}.get(how, "x = x.mean(1)"))
        return dict(base, s=0)
    if k0 != "vector":  # otherwise through a vector
        st = r_switch({"how": "mean"}, st, c, "vector")
    if to == "seq":
        T = b.get("size", 8)
        c(f"x = {c.mod('expand', lin(st['c'], T * D))}(x).view(x.size(0), {T}, {D})")
        return dict(base, c=D, s=T)
    s1 = {1: 8, 2: 4, 3: 2}[n1]
    c(f"x = {c.mod('expand', lin(st['c'], D * s1 ** n1))}(x).view(x.size(0), {D}{f', {s1}' * n1})")
    return dict(base, c=D, s=s1)


RENDER = {"conv": r_conv, "inverted": r_inverted, "pool": r_pool, "up": r_up, "split": r_split, "dense": r_dense,
          "convnext": r_convnext, "attn": r_attn, "ffn": r_ffn, "rnn": r_rnn, "convmod": r_convmod, "mlp": r_mlp,
          "mixer": r_mixer}


def extras(b, st, c):
    """Dropout, a Function, a gate behind a bool flag, a step counter and an EMA buffer written in
    forward."""
    if b.get("drop"):
        p, how = b["drop"]["p"], b["drop"]["how"]
        if how == "module":
            c(f"x = {c.mod('drop', f'torch.nn.Dropout({p})')}(x)")
        elif how == "functional":
            c(f"x = F.dropout(x, {p}, self.training)")
        else:
            c(f"if self.training:\n    x = F.dropout(x, {p})")
    if b.get("gate"):
        name = "unused_gate" if b["gate"] == "off" else "gate"
        c.init.append(f"self.{c.p}use_gate = {b['gate'] != 'off'}")
        if b["gate"] == "final":
            c.ann.append(f"{c.p}use_gate: torch.jit.Final[bool]")
        gate = c.mod(name, f"torch.nn.Parameter(torch.ones({st['c']}))")
        c(f"if self.{c.p}use_gate:\n    x = x * {gate}{shape_of(st)}")
    if b.get("fn"):
        c.helpers.add("Functions")
        c("x = halve_gradient(x)" if b["fn"] == "halve" else "x = drop_own_mask(x, 0.2)")
    if b.get("count"):
        c.init.append(f'self.register_buffer("{c.p}count", torch.zeros(1, dtype=torch.long))')
        c(f"self.{c.p}count.add_(1)")
    if b.get("ema"):
        c.init.append(f'self.register_buffer("{c.p}ema", torch.zeros({st["c"]}))')
        e = f"self.{c.p}ema"
        c(f"x = x + 0.1 * {e}{shape_of(st)}")
        c(f"with torch.no_grad():\n    {e}.mul_(0.9).add_(0.1 * x.mean({mean_dims(st, True)}))" if b["ema"] == "no_grad"
          else f"{e}.mul_(0.9).add_(0.1 * x.detach().mean({mean_dims(st, True)}))")


def indent(lines: List[str], n: int) -> str:
    return "".join(" " * n + part + "\n" for line in lines for part in line.split("\n"))


def _class(name: str, c: Code, args: List[str], ret: str, end: List[str]) -> str:
    sig = ", ".join(f"{a}: torch.Tensor" for a in args)
    return (f"class {name}(torch.nn.Module):\n" + indent(c.ann, 4)
            + "\n    def __init__(self):\n        super().__init__()\n" + indent(c.init, 8)
            + f"\n    def forward(self, {sig}) -> {ret}:\n" + indent(c.fwd + end, 8))


def _build(spec: Spec):
    """(source, the data's state before each block and at the end)."""
    K, W, S, N, blocks = spec["kind"], spec["width"], spec["size"], spec["batch"], spec["blocks"]
    m, classes, states, after = Code(), [], [], {}
    first = "tokens" if K == "tokens" else "x"
    inputs = [first] + (["mask"] if spec.get("mask") else []) + (["aux"] if spec.get("aux") else [])
    if K in DIMS:
        n = DIMS[K]
        shape = f"{N}, {(2, 3, 1)[n - 1]}" + f", {S}" * n
        m(f"x = {m.mod('stem', conv(n, (2, 3, 1)[n - 1], W, 3, 1, 1))}(x)")
        if spec.get("stem_norm"):
            m(f"x = F.relu({norm(m, 'stem_norm', K, W, 'bn')('x')})")
        st = {"kind": K, "c": W, "s": S}
    elif K == "tokens":
        shape = f"{N}, {S}"
        embed = f"torch.nn.Embedding({spec['vocab']}, {W}" + (", padding_idx=0)" if spec.get("padding_idx") else ")")
        m(f"x = {m.mod('embed', embed)}(tokens)")
        if spec["pos"] == "param":
            m(f"x = x + {m.mod('pos', f'torch.nn.Parameter(0.02 * torch.randn({S}, {W}))')}")
        elif spec["pos"] == "arange":
            m(f"x = x + {m.mod('pos', f'torch.nn.Embedding({S}, {W})')}(torch.arange(x.size(1), device=x.device))")
        st = {"kind": "seq", "c": W, "s": S, "mask": bool(spec.get("mask"))}
    else:
        shape = f"{N}, {S}, {spec['features']}" if K == "seq" else f"{N}, {spec['features']}"
        m(f"x = {m.mod('stem', lin(spec['features'], W))}(x)")
        st = {"kind": K, "c": W, "s": S if K == "seq" else 0, "mask": bool(spec.get("mask"))}
    keeps = {j - b["skip"]["back"] for j, b in enumerate(blocks) if b.get("skip")}
    after[-1] = st
    if -1 in keeps:
        m("keep_s = x")
    if any(b.get("collect") for b in blocks):
        m("feats: List[torch.Tensor] = []")
    aux, shared, fc, fmasks = spec.get("aux"), spec.get("shared"), [], set()
    for i in range(len(blocks) + 1):
        states.append(st)
        if aux and min(aux["at"], len(blocks)) == i:
            f, n = f"{m.mod('film', lin(aux['dim'], st['c']))}(aux)", DIMS.get(st["kind"])
            f += f".view(x.size(0), {st['c']}{', 1' * n})" if n else ".unsqueeze(1)" if st["kind"] == "seq" else ""
            m(f"x = x * (1 + {f})" if aux["how"] == "mul" else f"x = x + {f}")
        if shared and i in shared[:2] and (i == shared[0] or shared[2:] == [st["kind"], st["c"]]):
            if i == shared[0]:
                n = DIMS.get(st["kind"])
                m.mod("shared", conv(n, st["c"], st["c"], 1) if n else lin(st["c"], st["c"]))
                shared = shared[:2] + [st["kind"], st["c"]]
            m("x = x + self.shared(x)")
        if i == len(blocks):
            break
        b = blocks[i]
        if b["type"] != "switch" and b["on"] != st["kind"]:
            a = Code(f"a{i}_")
            st = r_switch({"how": "auto"}, st, a, b["on"])
            m.merge(a)
        nxt = blocks[i + 1] if i + 1 < len(blocks) else {"type": "", "on": b["on"]}  # does it transpose x?
        restrided = st["kind"] in DIMS and (nxt["type"] == "switch" or nxt["on"] != b["on"] or nxt.get("cl"))
        c = Code(f"b{i}_" if b.get("inline") else "", exact=bool(b.get("risky")) or not restrided)
        st = r_switch(b, st, c, b["to"]) if b["type"] == "switch" else RENDER[b["type"]](b, st, c)
        extras(b, st, c)
        for name in c.args:  # a float mask, made once per length before its first block, carried on
            if name.startswith("fmask") and name not in fmasks:
                m(f'{name} = torch.triu(torch.full([x.size(1), x.size(1)], float("-inf"), device=x.device), 1)')
                fmasks.add(name)
        if b.get("inline"):
            m.merge(c)
        else:
            m.helpers |= c.helpers
            classes.append(_class(f"Block{i}", c, ["x"] + c.args, "torch.Tensor", ["return x"]))
            m(f"x = {m.mod(f'b{i}', f'Block{i}()')}({', '.join(['x'] + c.args)})")
        sk, src = b.get("skip"), after.get(i - b["skip"]["back"]) if b.get("skip") else None
        if src and src["kind"] == st["kind"] and (st["kind"] != "seq" or src["s"] == st["s"]):
            n, y = DIMS.get(st["kind"]), "keep_s" if i - sk["back"] == -1 else f"keep{i - sk['back']}"
            if n and src["s"] > st["s"]:
                y = down(n, y, src["s"], st["s"])
            elif n and src["s"] < st["s"]:
                y = f'F.interpolate({y}, size={[st["s"]] * n}, mode="nearest")'
            cin = src["c"] + st["c"] if sk["how"] == "cat" else src["c"]
            proj = m.mod(f"skip{i}", conv(n, cin, st["c"], 1) if n else lin(cin, st["c"])) if cin != st["c"] else ""
            m(f"x = {proj}(torch.cat([x, {y}], {1 if n else -1}))" if sk["how"] == "cat" else f"x = x + {proj}({y})")
        if i in keeps:
            m(f"keep{i} = x")
        if b.get("collect"):
            m(f"feats.append(x.mean({mean_dims(st)}))" if st["kind"] != "vector" else "feats.append(x)")
            fc.append(st["c"])
        after[i] = st
    n, k, dense = DIMS.get(st["kind"]), spec["classes"], spec.get("dense") and st["kind"] != "vector"
    masked = st["kind"] == "seq" and st.get("mask")
    m("w = (~mask).unsqueeze(-1).to(x.dtype)\nfeat = (x * w).sum(1) / w.sum(1)" if masked else
      f"feat = x.mean({mean_dims(st)})" if st["kind"] != "vector" else "feat = x")
    z = "x" if dense else "feat"
    if spec.get("tied") and K == "tokens" and not n:
        if st["c"] != W:
            z = f"{m.mod('head_proj', lin(st['c'], W))}({z})"
        # Tied heads are written both ways: a linear reads the weight itself, a matmul its transpose
        # (a weight computed in the stage); the form follows the vocabulary, not a new draw.
        m(f"logits = torch.matmul({z}, self.embed.weight.t())" if spec["vocab"] % 2 else
          f"logits = F.linear({z}, self.embed.weight)")
        k = spec["vocab"]
    else:
        m(f"logits = {m.mod('head', conv(n, st['c'], k, 1) if dense and n else lin(st['c'], k))}({z})")
    out, ret = spec["out"], "torch.Tensor"
    if fc and out == "list":
        m("feats.append(logits)", "return feats")
        ret = "List[torch.Tensor]"
    else:
        if fc:
            agg = "torch.cat(feats, 1)"
            if spec["collect"] == "sum" and len(set(fc)) == 1:
                m("agg = feats[0]", "for f in feats[1:]:\n    agg = agg + f")
                agg = "agg"
            m(f"aux_logits = {m.mod('aux_head', lin(fc[0] if agg == 'agg' else sum(fc), k))}({agg})")
        extra = ["aux_logits"] if fc else []
        if out == "tensor":
            if fc:
                view = f".view(x.size(0), {k}{', 1' * n})" if dense and n else ".unsqueeze(1)" if dense else ""
                m(f"logits = logits + aux_logits{view}")
            m("return logits")
        elif out == "tuple":
            m(f"return ({', '.join(['logits', 'feat'] + extra)})")
            ret = f"Tuple[{', '.join(['torch.Tensor'] * (2 + len(extra)))}]"
        elif out == "list":
            m(f"outs: List[torch.Tensor] = [{', '.join(['logits', 'feat'] + extra)}]", "return outs")
            ret = "List[torch.Tensor]"
        else:
            m('out: Dict[str, torch.Tensor] = {"logits": logits, "features": feat}')
            m(*[f'out["aux"] = {e}' for e in extra])
            if spec.get("pred"):
                m('out["pred"] = logits.argmax(-1)')
            m("return out")
            ret = "Dict[str, torch.Tensor]"
    pad = max(1, S // 4) if spec.get("mask") else 0
    make = [f"tokens = torch.randint(0, {spec['vocab']}, ({shape}), generator=generator)" if K == "tokens"
            else f"x = torch.randn({shape}, generator=generator)"]
    if spec.get("mask"):
        make += [f"mask = torch.zeros({N}, {S}, dtype=torch.bool)", f"mask[{N - 1}, {S - pad}:] = True"]
    if aux:
        make.append(f"aux = torch.randn({N}, {aux['dim']}, generator=generator)")
    make.append(f"return ({', '.join(inputs)},)")
    src = ("import math\nfrom typing import Dict, List, Tuple\n\nimport torch\nimport torch.nn.functional as F\n\n\n"
           + "".join(HELPERS[h] + "\n\n" for h in sorted(m.helpers)) + "".join(cl + "\n\n" for cl in classes)
           + _class("Model", m, inputs, ret, [])
           + "\n\ndef make_inputs(generator: torch.Generator) -> Tuple[torch.Tensor, ...]:\n" + indent(make, 4))
    return src, states


def render(spec: Spec) -> str:
    return _build(spec)[0]


USES = {"conv": "out act bias inplace res norm k stride groups pad cl", "pool": "how",
        "inverted": "act inplace res norm stride expand se", "up": "how out norm act inplace",
        "split": "act inplace norm shuffle", "dense": "out act inplace norm", "convnext": "act norm",
        "attn": "heads fused causal mask post adrop bias variant inplace norm res",
        "ffn": "how ratio post act bias norm res", "rnn": "how layers bidir adrop norm res",
        "convmod": "causal act inplace norm", "mlp": "out act bias norm res", "mixer": "heads act"}


def draw_block(r: random.Random, t: str, kind: str, i: int) -> dict:
    """One block of type t over data of this kind at position i: the flags its renderer reads, and extras."""
    how = {"pool": ["max", "avg", "adaptive", "adaptive_max", "module"], "up": ["nearest", "convt"],
           "ffn": ["mlp", "glu", "swiglu"], "rnn": ["GRU", "LSTM"]}.get(t, [None])
    b = {"type": t, "on": kind, "how": r.choice(how), "out": r.choice([4, 8, 8, 12, 16]), "bias": r.random() < 0.7,
         "act": r.choice(ACTS + (["glu"] if t in ("conv", "mlp") else [])), "res": r.random() < 0.7,
         "inplace": r.choice([False, False, "F", "method", "torch"]), "variant": r.randint(0, 1),
         "norm": r.choice(["bn", "gn", "ln", "none"] if kind in DIMS else ["ln", "ln", "rms", "bn", "none"]),
         "k": r.choice([1, 3, 3]), "stride": r.random() < 0.25, "groups": r.choice(["1", "1", "grouped", "depthwise"]),
         "pad": r.random() < 0.8, "cl": kind == "image" and r.random() < 0.2, "expand": r.choice([2, 4]),
         "se": r.random() < 0.5, "shuffle": r.choice(["cat", "stack", "view"]), "heads": r.choice([1, 2, 4]),
         "fused": r.random() < 0.5, "causal": r.random() < 0.5, "mask": r.random() < 0.7, "post": r.random() < 0.2,
         "adrop": r.choice([0.0, 0.0, 0.1]), "ratio": r.choice([2, 4]), "layers": r.choice([1, 1, 2]),
         "bidir": r.random() < 0.3}
    b = {k: v for k, v in b.items() if k in ("type", "on") or k in USES[t].split()}
    if t == "attn" and r.random() < 0.3:
        b["mha"] = True
    if i >= 1 and r.random() < 0.2:
        b["skip"] = {"back": r.randint(2, min(i + 1, 5)), "how": r.choice(["add", "cat"])}
    if r.random() < 0.2:
        b["drop"] = {"p": r.choice([0.1, 0.2, 0.3]), "how": r.choice(["module", "functional", "training"])}
    for key, p, values in (("count", 0.1, [True]), ("ema", 0.08, ["detach"] * 7 + ["no_grad"]),
                           ("collect", 0.1, [True]), ("gate", 0.1, ["attr"] * 5 + ["final"] * 4 + ["off"]),
                           ("inline", 0.4, [True]), ("risky", 0.03, [True])):
        if r.random() < p:
            b[key] = r.choice(values)
    return b


def draw(seed: int) -> Spec:
    r = random.Random(seed)
    K = r.choice(["image", "image", "signal", "volume", "tokens", "tokens", "seq", "vector"])
    spec = {"kind": K, "batch": 2, "width": r.choice([4, 8, 8, 12, 16] if K != "volume" else [4, 8]),
            "classes": r.randint(3, 10),
            "size": r.choice({"image": [8, 12, 16], "volume": [4, 6, 8]}.get(K, [8, 12, 16])) if K != "vector" else 0}
    if K == "tokens":
        spec.update(vocab=r.randint(10, 32), pos=r.choice(["param", "arange", "none"]), padding_idx=r.random() < 0.2,
                    tied=r.random() < 0.5)
    if K in ("seq", "vector"):
        spec["features"] = r.randint(3, 8)
    spec.update(stem_norm=K in DIMS and r.random() < 0.5, mask=K in ("tokens", "seq") and r.random() < 0.5,
                out=r.choice(["tensor"] * 3 + ["tuple", "list", "dict"]), dense=r.random() < 0.3)
    spec["pred"] = spec["out"] == "dict" and r.random() < 0.3
    cur, nb, blocks = "seq" if K == "tokens" else K, r.randint(3, 8), []
    switches = {r.randint(1, nb - 1) for _ in range(r.choice([0, 0, 1, 1, 2]))}
    for i in range(nb):
        if i in switches:
            to = r.choice(SWITCHES[cur])
            blocks.append({"type": "switch", "on": cur, "to": to, "out": r.choice([8, 12, 16]),
                           "size": r.choice([4, 8]), "how": r.choice(SWITCH_HOW.get(to, ["auto"]))})
            if r.random() < 0.4:
                blocks[-1]["inline"] = True
            cur = to
        blocks.append(draw_block(r, r.choice(BLOCKS[group(cur)]), cur, len(blocks)))
    functions = random.Random(f"functions {seed}")  # a stream of its own: the other draws stay as they were
    for b in blocks:
        if functions.random() < 0.1:
            b["fn"] = functions.choice(["halve", "drop"])
    spec["blocks"] = blocks
    spec["collect"] = r.choice(["cat", "sum"])
    if r.random() < 0.2:
        spec["aux"] = {"at": r.randint(0, len(blocks)), "dim": r.randint(2, 6), "how": r.choice(["mul", "add"])}
    spec["unused"] = any(b.get("gate") == "off" for b in blocks)
    states = _build(spec)[1]
    pairs = [[i, j] for i in range(len(states)) for j in range(i + 2, len(states))
             if (states[i]["kind"], states[i]["c"]) == (states[j]["kind"], states[j]["c"])]
    if pairs and r.random() < 0.2:
        spec["shared"] = r.choice(pairs)
    return spec


def load(spec: Spec, directory: str) -> types.ModuleType:
    name = "fuzz_model_" + hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    path = os.path.join(directory, name + ".py")
    with open(path, "w") as f:
        f.write(render(spec))
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # torch.jit.script reads the classes' source through sys.modules
    module_spec.loader.exec_module(module)
    return module


def shrink(spec: Spec) -> Iterator[Spec]:
    def with_blocks(blocks):
        s = dict(spec, blocks=blocks, unused=any(b.get("gate") == "off" for b in blocks))
        if s.get("shared") and max(s["shared"]) > len(blocks):
            del s["shared"]
        return s
    bl = spec["blocks"]
    if len(bl) > 1:
        yield with_blocks(bl[:len(bl) // 2])
        yield with_blocks(bl[len(bl) // 2:])
        for i in range(len(bl)):
            yield with_blocks(bl[:i] + bl[i + 1:])
    for key, simple in (("aux", None), ("shared", None), ("mask", False), ("tied", False), ("out", "tensor"),
                        ("dense", False), ("pred", False), ("stem_norm", False), ("pos", "none"),
                        ("padding_idx", False)):
        if spec.get(key, simple) != simple:
            yield {k: v for k, v in spec.items() if k != key} if simple is None else dict(spec, **{key: simple})
    for i, b in enumerate(bl):
        for key in b:
            if key in EXTRAS or (key in SIMPLE and b[key] != SIMPLE[key]):
                nb = {k: v for k, v in b.items() if k != key} if key in EXTRAS else dict(b, **{key: SIMPLE[key]})
                yield with_blocks(bl[:i] + [nb] + bl[i + 1:])
    for key in ("width", "size"):
        if spec.get(key, 0) > {"width": 4, "size": 8 if spec["kind"] != "volume" else 4}[key]:
            yield dict(spec, **{key: max(spec[key] // 2, 4)})
    for i, b in enumerate(bl):
        if b.get("out", 4) > 4:
            yield with_blocks(bl[:i] + [dict(b, out=max(b["out"] // 2, 4))] + bl[i + 1:])


def summary(spec: Spec) -> str:
    def one(b):
        flags = [k for k in ("causal", "mask", "res", "inplace", "stride", "cl", "se", "fused", "post", "bidir", "mha")
                 if b.get(k) and (k != "mask" or spec.get("mask"))]
        flags += [k if b[k] is True else f"{k}={b[k]}" for k in EXTRAS if b.get(k) and k not in ("skip", "drop")]
        flags += [f"skip={b['skip']['how']}-{b['skip']['back']}"] if b.get("skip") else []
        name = b["type"] + (f">{b['to']}" if b["type"] == "switch" else "") + (f":{b['how']}" if "how" in b else "")
        return name + (f"({','.join(flags)})" if flags else "")
    kinds = [spec["kind"]] + [b["to"] for b in spec["blocks"] if b["type"] == "switch"]
    top = [k for k in ("mask", "aux", "tied", "shared", "dense", "unused") if spec.get(k)]
    return (f"{'>'.join(kinds)} w{spec['width']} s{spec['size']} {len(spec['blocks'])} blocks: "
            f"{' '.join(one(b) for b in spec['blocks'])}; out={spec['out']}" + (f"; {','.join(top)}" if top else ""))


def loss_of(output) -> "torch.Tensor":
    import torch
    ts = [output] if isinstance(output, torch.Tensor) else list(output.values() if isinstance(output, dict) else output)
    return sum(t.float().pow(2).mean() for t in ts if t.is_floating_point())


def _check(seed: int, spec: Spec, directory: str, times: Dict[str, list], deep=True, optimized=False) -> List[str]:
    """Scripts the model and trains it three times from one state, then a second copy three times: the
    gradients must be finite and agree run by run. Then bf16 autocast and eval mode. Runs as jitckpt
    defines the unmodified model, under torch.jit.optimized_execution(False), unless optimized (the
    profiling executor: its first runs differ from later ones in the last bits, so only those compare)."""
    import time
    import warnings
    import torch
    assert json.loads(json.dumps(spec)) == spec, "spec does not round-trip through JSON"
    module = load(spec, directory)
    inputs = module.make_inputs(torch.Generator().manual_seed(seed))

    def make():
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = torch.jit.script(module.Model()).train()
        times["script"].append(time.perf_counter() - t0)
        return model

    def train(model, runs, bf16=False):
        state, grads = {k: v.clone() for k, v in model.state_dict().items()}, []
        for _ in range(runs):
            model.load_state_dict(state)
            model.zero_grad(set_to_none=True)
            torch.manual_seed(1)
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model(*inputs)
            loss_of(out).backward()
            elapsed = time.perf_counter() - t0
            grads.append({k: p.grad for k, p in model.named_parameters()})
            missing = [k for k, g in grads[-1].items() if g is None and "unused" not in k]
            bad = [k for k, g in grads[-1].items() if g is not None and not torch.isfinite(g).all()]
            if missing or bad:
                raise RuntimeError(f"no gradient for {missing[:3]}, non-finite for {bad[:3]}")
        times["bf16 autocast" if bf16 else "forward/backward"].append(elapsed)
        return grads
    try:
        model = make()
    except Exception as e:
        return [f"script: {str(e).strip().splitlines()[0]}"]
    problems = []
    with torch.jit.optimized_execution(optimized):
        for what, runs, bf16 in (("forward/backward", 3, False), ("nondeterministic", 3, False),
                                 ("bf16 autocast", 2, True)):
            try:
                grads = train(model if what == "forward/backward" else make(), runs, bf16)
                if what == "forward/backward":
                    reference = grads
                elif what == "nondeterministic":
                    pairs = [(run, reference[-1]) for run in grads[1:]] if optimized else zip(grads, reference)
                    if any(not torch.equal(g, ref[k]) for run, ref in pairs for k, g in run.items() if g is not None):
                        problems.append("nondeterministic gradients")
            except Exception as e:
                problems.append(f"{what}: {str(e).strip().splitlines()[-1]}")
            if problems and what == "forward/backward" or not deep:
                return problems
        model.eval()
        with torch.no_grad():
            model(*inputs)
    return problems


if __name__ == "__main__":
    import statistics
    import tempfile
    import torch
    first, last = int(sys.argv[1]), int(sys.argv[2])
    torch.backends.mkldnn.enabled = "--no-mkldnn" not in sys.argv  # Debian's 2.6: oneDNN conv backward NaNs
    times, failures, counts = {"script": [], "forward/backward": [], "bf16 autocast": []}, [], {}
    with tempfile.TemporaryDirectory() as directory:
        for seed in range(first, last):
            spec = draw(seed)
            assert draw(seed) == spec and render(spec) == render(json.loads(json.dumps(spec)))
            for p in _check(seed, spec, directory, times, optimized="--optimized" in sys.argv):
                failures.append((seed, p))
                counts[p.split(":")[0]] = counts.get(p.split(":")[0], 0) + 1
                print(f"seed {seed}: {p}\n    {summary(spec)}", flush=True)
            if "--shrink" in sys.argv:
                for small in shrink(spec):
                    assert small != spec, "shrink gave the spec itself"
                    for p in _check(seed, small, directory, {k: [] for k in times}, False, "--optimized" in sys.argv):
                        failures.append((seed, "shrunk " + p))
                        print(f"seed {seed} shrunk: {p}\n    {summary(small)}", flush=True)
    med = {k: f"{1000 * statistics.median(v):.1f} ms" for k, v in times.items() if v}
    print(f"torch {torch.__version__}: seeds {first}..{last - 1}: {len(failures)} failures {counts}; medians {med}")
