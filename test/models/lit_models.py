"""Small scripted models for the lit tests: `models.py PREFIX NAME...` scripts each NAME and saves it
as PREFIX.NAME.pt (one Python start per lit file, not one per model)."""
import sys
from typing import Dict, List

import torch
import torch.nn.functional as F
from torch import nn


class PlainChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


class Residual(nn.Module):
    """b = 2 * c1(x); b += c2(b): the cut after the multiplication is written in place by the next
    stage, the cut right after c1 is not."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        b = self.c1(x) * 2
        b.add_(self.c2(b))
        return self.c3(b)


class InplaceResidual(nn.Module):
    """y = c1(x); y += c2(y): the only cut between c1 and c2 carries y, which the next stage writes."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.c1(x)
        y.add_(self.c2(y))
        return self.c3(y)


class BasicBlocks(nn.Module):
    """Two torchvision-style residual blocks: out += identity; relu_(out)."""

    def __init__(self):
        super().__init__()
        self.a1, self.a2 = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.b1, self.b2 = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        out = self.a2(torch.relu_(self.a1(x)))
        out += x
        x = torch.relu_(out)
        out = self.b2(torch.relu_(self.b1(x)))
        out += x
        return torch.relu_(out)


class WithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.head = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))))


class TwoTensorBoundary(nn.Module):
    """Carries a gate computed from the input beside the hidden state through every layer."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        mask = torch.sigmoid(x)
        for layer in self.layers:
            x = layer(x) * mask
        return x


class WithLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre, self.post = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x, n: int):
        x = self.pre(x)
        for _ in range(n):
            x = torch.tanh(x @ self.post.weight)
        return self.post(x)


class NoCut(nn.Module):
    """A dict written between the two matmuls and read after both, under keys it computes: no
    position between them holds only tensors."""

    def forward(self, x, y):
        kept = {str(x.dim()): x}
        kept[str(y.dim() + 1)] = torch.matmul(torch.relu(x), y)
        return torch.matmul(x, torch.sigmoid(y)) + kept["3"] + kept["2"]


class GlobalSkip(nn.Module):
    """return x + body(x): every cut inside the body carries x beside the body's activation, twice
    what the ends carry (denoising and super-resolution nets)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = torch.relu(layer(h))
        return x + h


class NestedInner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x):
        return F.relu(self.lin(x))  # a scripted function: prim::CallFunction


class NestedMiddle(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.inner = nn.Linear(8, 16), NestedInner()

    def forward(self, x):
        return self.inner(torch.relu(self.lin(x)))


class Nested(nn.Module):
    """Calls two levels deep: Nested.forward -> middle -> inner, each a prim::CallMethod."""

    def __init__(self):
        super().__init__()
        self.middle = NestedMiddle()

    def forward(self, x):
        return torch.tanh(self.middle(x))


class PrologueEpilogue(nn.Module):
    """A list input concatenated before the chain, a softmax and a tuple after it: the cat and the
    softmax are no part of the chain region."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, xs: List[torch.Tensor]):
        y = self.l2(torch.relu(self.l1(torch.cat(xs, 1))))
        return torch.softmax(y, 1), y


class MaskedBlocks(nn.Module):
    """Three attention-like blocks that all read a mask passed to forward, and a mask built in
    forward from the input's length: both are side values, not boundary tensors."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x, mask):
        causal = torch.triu(torch.ones(x.size(1), x.size(1)), 1) * -1e4
        for block in self.blocks:
            scores = torch.matmul(block(x), x.transpose(1, 2)) + mask + causal
            x = x + torch.matmul(torch.softmax(scores, -1), x)
        return x


class TwoSequences(nn.Module):
    """Source and target token ids, each embedded, as an encoder-decoder's two streams; a causal
    mask built in forward from the target's length."""

    def __init__(self):
        super().__init__()
        self.src_emb, self.tgt_emb = nn.Embedding(16, 8), nn.Embedding(16, 8)
        self.encoder = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.query = nn.Linear(8, 8)
        self.decoder = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])

    def forward(self, src, tgt):
        causal = torch.triu(torch.ones(tgt.size(1), tgt.size(1)), 1) * -1e4
        memory = self.src_emb(src)
        for layer in self.encoder:
            memory = memory + torch.relu(layer(memory))
        x = self.tgt_emb(tgt)
        scores = torch.matmul(self.query(x), x.transpose(1, 2)) + causal
        x = x + torch.matmul(torch.softmax(scores, -1), x)
        for layer in self.decoder:
            x = x + torch.relu(layer(x + memory))
        return x


class FlagAcrossLayers(nn.Module):
    """A flag and a scale that forward derives from its first layer's output and every later layer
    reads (as nn.TransformerDecoder's tgt_is_causal on PyTorch 2.x): carried across cuts as tensors,
    so that each layer stays a stage."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        h = self.first(x)
        wide = h.size(0) > 2
        scale = 1.0 / h.size(-1)
        for layer in self.layers:
            h = layer(h) * scale
            if wide:
                h = torch.relu(h)
        return h


class SkipNet(nn.Module):
    """A two-level U-Net: the skips are live across the cuts of the bottom, so those cuts carry
    several tensors."""

    def __init__(self):
        super().__init__()
        self.e1, self.e2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
        self.b1, self.b2 = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)
        self.d2, self.d1 = nn.Conv2d(32, 8, 3, padding=1), nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x):
        s1 = torch.relu(self.e1(x))
        s2 = torch.relu(self.e2(F.max_pool2d(s1, 2)))
        h = torch.relu(self.b2(torch.relu(self.b1(F.max_pool2d(s2, 2)))))
        h = torch.relu(self.d2(torch.cat([F.interpolate(h, scale_factor=2.0), s2], 1)))
        return self.d1(torch.cat([F.interpolate(h, scale_factor=2.0), s1], 1))


class DenseList(nn.Module):
    """A DenseNet-style block: each layer reads the concatenation of a growing feature list and
    appends its output, so the list is live across every cut between layers."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layers = nn.ModuleList([nn.Conv2d(4 + 2 * i, 2, 3, padding=1) for i in range(3)])
        self.head = nn.Conv2d(10, 4, 1)

    def forward(self, x):
        features: List[torch.Tensor] = [torch.relu(self.stem(x))]
        for layer in self.layers:
            features.append(torch.relu(layer(torch.cat(features, 1))))
        return self.head(torch.cat(features, 1))


class CollectedOutputs(nn.Module):
    """Returns every layer's output in a list made empty where forward starts and grown by append:
    the list crosses every cut and the chain's end."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x) -> List[torch.Tensor]:
        outputs: List[torch.Tensor] = []
        for layer in self.layers:
            x = torch.relu(layer(x))
            outputs.append(x)
        return outputs


class Recurrent(nn.Module):
    """Two LSTMs: their weights reach aten::lstm through the Tensor[] attribute _flat_weights."""

    def __init__(self):
        super().__init__()
        self.r1, self.r2 = nn.LSTM(4, 8, batch_first=True), nn.LSTM(8, 8, batch_first=True)

    def forward(self, x):
        return self.r2(self.r1(x)[0])[0]


class EmaOfActivations(nn.Module):
    """A buffer read through a view, then updated in place (mul_ then add_): no cut may carry the
    view or mul_'s result, both aliases of the buffer."""

    def __init__(self):
        super().__init__()
        self.c0, self.c1 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.register_buffer("ema", torch.zeros(4))

    def forward(self, x):
        h = torch.relu(self.c0(x))
        e = self.ema.view(1, 4, 1, 1)
        h = self.c1(h) * (1.0 + e)
        self.ema.mul_(0.9).add_(0.1 * h.detach().mean([0, 2, 3]))
        return self.c2(h)


class ZeroedBiasClones(nn.Module):
    """Each layer zeroes part of a clone of its bias (Swin V2's key bias): the clone is made of
    parameters alone, yet written in place, so it stays in its layer's stage."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            bias = layer.bias.clone()
            bias[:4].zero_()
            x = torch.relu(F.linear(x, layer.weight, bias))
        return x


class LayerFeatures(nn.Module):
    """Returns the outputs of the layers `return_layers` names, in a dict made empty where forward
    starts and filled layer by layer (torchvision's IntermediateLayerGetter), and a head on one."""

    return_layers: Dict[str, str]  # an attribute forward reads, as torchvision declares it

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict({f"layer{i}": nn.Linear(8, 8) for i in range(1, 5)})
        self.return_layers = {"layer2": "aux", "layer4": "out"}
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        features: Dict[str, torch.Tensor] = {}
        for name, layer in self.layers.items():
            x = torch.relu(layer(x))
            if name in self.return_layers:
                features[self.return_layers[name]] = x
        result: Dict[str, torch.Tensor] = {}
        result["out"] = self.head(features["out"])
        result["aux"] = features["aux"]
        return result


MODELS = {
    m.__name__: m
    for m in [PlainChain, Residual, InplaceResidual, BasicBlocks, WithBatchNorm, TwoTensorBoundary, WithLoop, NoCut,
              GlobalSkip, Nested, PrologueEpilogue, MaskedBlocks, TwoSequences, SkipNet, DenseList, CollectedOutputs,
              Recurrent, FlagAcrossLayers, EmaOfActivations, ZeroedBiasClones, LayerFeatures]
}

if __name__ == "__main__":
    for name in sys.argv[2:]:
        torch.jit.save(torch.jit.script(MODELS[name]()), f"{sys.argv[1]}.{name}.pt")
