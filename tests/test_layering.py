"""The package's layering, read from the source: every ``import`` of a ``masdr_router`` module,
including the lazy ones inside functions and those only for type checking, goes downwards in
LAYERS. So ``routers/`` never imports ``training/``, and no two layers import each other."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "masdr_router"

# bottom up; a layer may import only the layers before it
LAYERS = ["_version", "errors", "extras", "config", "query", "atomic", "pinned", "artifacts", "progress", "devices",
          "process", "taxonomy", "data", "llm", "retrieval", "datasets", "querygen", "routers", "answer", "evaluation",
          "training", "serve", "cli"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Absolute names of the masdr_router modules ``path`` imports, anywhere in the file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {t for t in found if t == "masdr_router" or t.startswith("masdr_router.")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "masdr_router"


GRAPH = {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def test_every_module_belongs_to_a_known_layer():
    unknown = {layer(m) for m in GRAPH} - set(LAYERS) - {"masdr_router"}
    assert not unknown, f"add {sorted(unknown)} to LAYERS where it belongs"


@pytest.mark.parametrize("inference", ["routers", "serve"])
def test_inference_never_imports_training(inference):
    offending = {m: sorted(t for t in targets if layer(t) in ("training", "evaluation"))
                 for m, targets in GRAPH.items() if layer(m) == inference}
    assert not {m: t for m, t in offending.items() if t}


@pytest.mark.parametrize("upper", LAYERS)
def test_imports_only_go_down(upper):
    allowed = set(LAYERS[: LAYERS.index(upper) + 1])
    upward = {m: sorted(t for t in targets if layer(t) not in allowed)
              for m, targets in GRAPH.items() if layer(m) == upper}
    assert not {m: t for m, t in upward.items() if t}


def test_the_layer_graph_has_no_cycle():
    edges = {layer(m): set() for m in GRAPH}
    for m, targets in GRAPH.items():
        edges[layer(m)].update(layer(t) for t in targets if layer(t) != layer(m))
    edges.pop("masdr_router")  # the package's lazy re-exports name every layer by design
    for e in edges.values():
        e.discard("masdr_router")
    state: dict[str, int] = {}

    def visit(n, path):
        if state.get(n) == 1:
            raise AssertionError("import cycle: " + " -> ".join([*path, n]))
        if state.get(n) == 2:
            return
        state[n] = 1
        for nxt in sorted(edges.get(n, ())):
            visit(nxt, [*path, n])
        state[n] = 2

    for n in sorted(edges):
        visit(n, [])
