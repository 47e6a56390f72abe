"""torch.vmap in an exported program -> the ATen ops its batching runs, in the program's graph.

Export's training graph keeps a vmap call as functorch's markers around the function's ops
(`_vmap_increment_nesting`, `_add_batch_dim`, ..., `_remove_batch_dim`), which TorchScript cannot
run. A region of them that reads no tensor that may require grad (an attention mask: Hugging Face
builds Falcon's with vmap) and whose sizes are the capture's own is traced again by make_fx, with
fake tensors, to the ATen ops its batching rules run, and those take its place: a mask is computed
as the model computes it. A region that reads what may require grad, or that runs on dynamic sizes,
raises CaptureError (capture then tries the call's own sizes).
"""
from typing import Any, List, Optional, Set

import torch
import torch.fx

from .aten_graph import CaptureError, _user_line

_START, _END = "_vmap_increment_nesting", "_vmap_decrement_nesting"
# Tested on 2.14; 2.6's export captures a vmap only now and then (an NYI error otherwise): lines
# before 2.14 refuse the markers where export leaves them.
LOWERS_VMAP = torch.torch_version.TorchVersion(torch.__version__) >= "2.14"


def lower_vmap(program: Any) -> None:
    """Replaces each outermost vmap region of `program`'s graph by its ATen ops, in place."""
    graph = program.graph_module.graph
    markers = [node for node in graph.nodes if _marker(node)]
    if not markers:
        return
    if not LOWERS_VMAP:
        raise CaptureError(f"jitckpt runs a torch.vmap in forward from PyTorch 2.14 on ({_where(markers)}); "
                           f"this is {torch.__version__}")
    without_grad = _inputs_without_grad(program)
    while True:
        region = _first_region(graph)
        if region is None:
            break
        _replace(program.graph_module, region, without_grad)
    for node in list(graph.nodes):  # markers left alone: the loading of vmap's decompositions
        if _marker(node) == "lazy_load_decompositions" and not node.users:
            graph.erase_node(node)
    program.graph_module.recompile()


def _marker(node: torch.fx.Node) -> str:
    target = node.target
    if node.op == "call_function" and getattr(target, "__module__", "") == "torch._functorch.predispatch":
        return getattr(target, "__name__", "")
    return ""


def _first_region(graph: torch.fx.Graph) -> Optional[List[torch.fx.Node]]:
    """The nodes from the first vmap's start to the end of that vmap (nested ones inside), or None."""
    region: List[torch.fx.Node] = []
    depth = 0
    for node in graph.nodes:
        marker = _marker(node)
        if depth == 0 and marker != _START:
            continue
        region.append(node)
        depth += (marker == _START) - (marker == _END)
        if depth == 0:
            return region
    if region:
        raise CaptureError(f"jitckpt found a torch.vmap without its end in the captured graph ({_where(region)})")
    return None


def _inputs_without_grad(program: Any) -> Set[str]:
    """Placeholders that never require grad: buffers and constants."""
    names = set()
    placeholders = [n for n in program.graph_module.graph.nodes if n.op == "placeholder"]
    for node, spec in zip(placeholders, program.graph_signature.input_specs):
        if spec.kind.name in ("BUFFER", "CONSTANT_TENSOR"):
            names.add(node.name)
    return names


def _replace(graph_module: torch.fx.GraphModule, region: List[torch.fx.Node], without_grad: Set[str]) -> None:
    inside = set(region)
    inputs: List[torch.fx.Node] = []
    for node in region:
        inputs += [a for a in node.all_input_nodes if a not in inside and a not in inputs]
    outputs = [n for n in region if any(u not in inside for u in n.users)]
    values = [a.meta.get("val") for a in inputs if a.op != "get_attr"]
    for node, value in zip([a for a in inputs if a.op != "get_attr"], values):
        _check_input(node, value, without_grad, region)
    traced = _trace(graph_module, region, inputs, outputs, values)
    if any(node.op == "get_attr" for node in traced.graph.nodes):
        raise CaptureError(f"jitckpt cannot yet run a torch.vmap that makes a tensor of given values ({_where(region)})")
    graph = graph_module.graph
    replacement = iter([a for a in inputs if a.op != "get_attr"])
    env = {}
    with graph.inserting_before(region[0]):
        for node in traced.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(replacement)
            elif node.op == "output":
                results = node.args[0]
            else:
                env[node] = graph.node_copy(node, lambda n: env[n])
                env[node].meta["stack_trace"] = region[0].meta.get("stack_trace")
    for old, new in zip(outputs, results):
        old.replace_all_uses_with(env[new])
    for node in reversed(region):
        graph.erase_node(node)
    for node in inputs:
        if node.op == "get_attr" and not node.users:
            graph.erase_node(node)


def _check_input(node: torch.fx.Node, value: Any, without_grad: Set[str], region: List[torch.fx.Node]) -> None:
    if isinstance(value, torch.Tensor):
        if (value.is_floating_point() or value.is_complex()) and node.name not in without_grad:
            raise CaptureError(f"jitckpt cannot run torch.vmap on a tensor that may require grad ({_where(region)}); "
                               "apply the function to the batch without vmap")
        sizes = list(value.shape)
    elif isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        sizes = [value]
    else:
        return
    if not all(isinstance(s, int) for s in sizes):
        raise CaptureError(f"jitckpt runs torch.vmap at the call's own sizes only ({_where(region)})")


def _trace(graph_module: torch.fx.GraphModule, region: List[torch.fx.Node], inputs: List[torch.fx.Node],
           outputs: List[torch.fx.Node], values: List[Any]) -> torch.fx.GraphModule:
    """The region as a module of its own, traced to ATen ops with fake tensors (a branch on data
    would raise, not be decided by example values)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    sub = torch.fx.Graph()
    env = {}
    for node in inputs:
        env[node] = sub.node_copy(node) if node.op == "get_attr" else sub.placeholder(node.name)
    for node in region:
        env[node] = sub.node_copy(node, lambda n: env[n])
    sub.output(tuple(env[n] for n in outputs))
    module = torch.fx.GraphModule(graph_module, sub)
    examples = [torch.zeros(v.shape, dtype=v.dtype, device=v.device) if isinstance(v, torch.Tensor) else v
                for v in values]
    try:
        with torch.no_grad():
            return make_fx(module, tracing_mode="fake")(*examples)
    except Exception as error:  # a branch on data, an op without fake kernel
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise CaptureError(f"jitckpt could not trace a torch.vmap in the captured graph to ATen ops "
                           f"({_where(region)}): {first}") from error


def _where(region: List[torch.fx.Node]) -> str:
    for node in region:
        line = _user_line(node)
        if line:
            return line
    return region[0].name

