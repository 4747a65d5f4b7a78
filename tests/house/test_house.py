"""House rules of the package, checked statically (no tierlab module is imported).

Read from the source of ``common/``, ``emulator/``, ``traces/`` and ``kernels/`` with :mod:`ast`:
third-party imports are declared in ``pyproject.toml`` (and optional ones are imported lazily), the
modules import one another without a cycle, through public names only, along the allowed
directions between rooms (``docs/design.md``), no module is over 500 lines, and the README's layout
table names every room.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# import name -> folder: one installed package, tierlab, whose folders pyproject.toml's package-dir maps
# (emulator/ is tierlab itself; common/, traces/ and kernels/ its subpackages)
PACKAGES = {"tierlab": "emulator", "tierlab.common": "common", "tierlab.traces": "traces",
            "tierlab.kernels": "kernels"}
FIRST_PARTY = {"tierlab"}
MAX_LINES = 500

# import name -> distribution name, where they differ
DISTRIBUTION = {
    "yaml": "PyYAML",
    "PIL": "Pillow",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "cv2": "opencv-python",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "google.protobuf": "protobuf",
    "attr": "attrs",
    "pycachesim": "pycachesim",
}


def norm(dist: str) -> str:
    """A distribution name normalised as PEP 503 does (case, ``-``, ``_`` and ``.`` alike)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


@dataclass(frozen=True)
class Imp:
    """One import statement's target, as written and resolved."""

    module: str          # the importing module (dotted)
    line: int
    target: str          # the module imported (dotted, absolute), or for ``from X import Y`` X.Y
    base: str            # ``X`` of ``from X import Y`` (``target`` for ``import X``)
    name: str | None     # ``Y`` of ``from X import Y`` (None for ``import X``)
    top_level: bool      # executed when the module is imported (not inside a function)
    type_checking: bool  # inside ``if TYPE_CHECKING:`` (never executed)

    def where(self) -> str:
        return f"{path_of(self.module)}:{self.line}"


@lru_cache(None)
def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT / folder).with_suffix("")
            parts = (pkg,) + (rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            out[".".join(parts)] = p
    return out


def path_of(module: str) -> str:
    return str(modules()[module].relative_to(ROOT))


@lru_cache(None)
def tree(module: str) -> ast.Module:
    p = modules()[module]
    return ast.parse(p.read_text(encoding="utf-8"), filename=str(p))


def is_package(module: str) -> bool:
    return modules()[module].name == "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@lru_cache(None)
def imports(module: str) -> tuple[Imp, ...]:
    """Every import in ``module``, at any depth (functions, classes, ``try``, ``if``)."""
    found: list[Imp] = []
    pkg = module if is_package(module) else module.rpartition(".")[0]

    def visit(node: ast.AST, top: bool, tc: bool) -> None:
        for child in ast.iter_child_nodes(node):
            c_top = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            c_tc = tc or (isinstance(node, ast.If) and child in node.body and _is_type_checking(node.test))
            if isinstance(child, ast.Import):
                for a in child.names:
                    found.append(Imp(module, child.lineno, a.name, a.name, None, c_top, c_tc))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    anchor = pkg.split(".")
                    anchor = anchor[:len(anchor) - (child.level - 1)]
                    base = ".".join(anchor + ([child.module] if child.module else []))
                else:
                    base = child.module or ""
                for a in child.names:
                    found.append(Imp(module, child.lineno, f"{base}.{a.name}", base, a.name, c_top, c_tc))
            visit(child, c_top, c_tc)

    visit(tree(module), True, False)
    return tuple(found)


def resolve(imp: Imp) -> str | None:
    """The tierlab module an import loads (the submodule for ``from pkg import submodule``), or
    None when it is not one of ours."""
    mods = modules()
    if imp.base.split(".")[0] not in FIRST_PARTY:
        return None
    if imp.name is not None and imp.target in mods:
        return imp.target
    name = imp.base
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def declared_dependencies() -> tuple[set[str], dict[str, set[str]]]:
    """(base dependencies, {extra: dependencies}) of ``pyproject.toml``, names normalised."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(reqs):
        return {norm(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r).group(1)) for r in reqs}

    return names(project.get("dependencies", [])), {
        extra: names(reqs) for extra, reqs in project.get("optional-dependencies", {}).items()}


def distribution_of(imported: str) -> str:
    for name, dist in DISTRIBUTION.items():
        if imported == name or imported.startswith(name + "."):
            return dist
    return imported.split(".")[0]


# --- a. third-party imports are declared; optional ones imported lazily ----------------------------

def test_third_party_imports_are_declared():
    base, extras = declared_dependencies()
    undeclared, eager = [], []
    for mod in modules():
        for imp in imports(mod):
            top = imp.base.split(".")[0] if imp.base else ""
            if not top or top in FIRST_PARTY or top in sys.stdlib_module_names or top == "__future__":
                continue
            dist = norm(distribution_of(imp.base))
            if dist in base:
                continue
            in_extras = sorted(e for e, deps in extras.items() if dist in deps)
            if not in_extras:
                undeclared.append(f"{imp.where()}: imports {imp.base!r} (distribution {dist!r}), declared "
                                  f"neither in [project] dependencies nor in an optional extra")
            elif imp.top_level and not imp.type_checking:
                eager.append(f"{imp.where()}: imports {imp.base!r} at module level, but {dist!r} is only in "
                             f"the extra(s) {', '.join(in_extras)}; import it inside the function that needs it")
    assert not undeclared, "undeclared third-party imports:\n" + "\n".join(undeclared)
    assert not eager, "optional dependencies imported at module level:\n" + "\n".join(eager)


# --- b. no import cycle ------------------------------------------------------------------------------

def import_graph(type_checking: bool = True) -> dict[str, dict[str, Imp]]:
    """tierlab module -> {tierlab module it imports: the first such import}. Imports under
    ``if TYPE_CHECKING:`` count too (``type_checking``): they never run, but two modules that name
    each other's types are one module's worth of design in two files, and a type checker walks them."""
    graph: dict[str, dict[str, Imp]] = {}
    for mod in modules():
        edges = graph.setdefault(mod, {})
        for imp in imports(mod):
            dst = resolve(imp)
            if dst is not None and dst != mod and (type_checking or not imp.type_checking):
                edges.setdefault(dst, imp)
    return graph


def find_cycle(graph: dict[str, dict[str, Imp]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = GREY
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = BLACK
                stack.pop()
                path.pop()
            elif colour.get(nxt, BLACK) == GREY:
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt) == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    return None


def test_no_import_cycle():
    graph = import_graph()
    found = []
    while (cycle := find_cycle(graph)) is not None:
        steps = [f"  {a} -> {b}  ({graph[a][b].where()}{', in a function' if not graph[a][b].top_level else ''})"
                 for a, b in zip(cycle, cycle[1:])]
        found.append("import cycle: " + " -> ".join(cycle) + "\n" + "\n".join(steps))
        graph = {a: {b: i for b, i in e.items() if (a, b) != (cycle[-2], cycle[-1])} for a, e in graph.items()}
    assert not found, "\n".join(found)


def test_find_cycle_finds_one():
    g = {"a": {"b": None}, "b": {"c": None}, "c": {"a": None}, "d": {"a": None}}
    assert find_cycle(g) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": None}, "b": {}}) is None


# --- c. only public names cross modules --------------------------------------------------------------

def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_aliases(mod: str) -> dict[str, str]:
    """Local names (anywhere in ``mod``) bound to a tierlab module by an import -> that module."""
    mods = modules()
    out: dict[str, str] = {}
    for node in ast.walk(tree(mod)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in FIRST_PARTY:
                    continue
                if a.asname:
                    out[a.asname] = a.name
                else:
                    out[a.name.split(".")[0]] = a.name.split(".")[0]
    for imp in imports(mod):
        if imp.name is not None and imp.target in mods:
            out[imp.name] = imp.target
    # a ``from`` import that binds another name over a module alias wins (rare): keep what resolves
    return {k: v for k, v in out.items() if v in mods}


def dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return None


def test_no_private_names_across_modules():
    mods = modules()
    bad = []
    for mod in mods:
        for imp in imports(mod):
            dst = resolve(imp)
            if dst is None or dst == mod:
                continue
            for n in imp.target.split("."):   # the module path, and for ``from X import Y`` Y too
                if is_private(n):
                    what = f"from {imp.base} import {imp.name}" if imp.name else f"import {imp.target}"
                    bad.append(f"{imp.where()}: {what} (private name {n!r} of {dst})")
        aliases = module_aliases(mod)
        for node in ast.walk(tree(mod)):
            if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
                continue
            chain = dotted(node.value)
            if not chain or chain[0] not in aliases:
                continue
            target = ".".join([aliases[chain[0]]] + chain[1:])
            if target in mods and target != mod:
                bad.append(f"{path_of(mod)}:{node.lineno}: {'.'.join(chain)}.{node.attr} "
                           f"(private name {node.attr!r} of {target})")
    assert not bad, "private names used across tierlab modules:\n" + "\n".join(bad)


# --- d. modules stay small ---------------------------------------------------------------------------

def test_no_module_over_500_lines():
    long = []
    for mod, p in modules().items():
        n = len(p.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            long.append(f"{p.relative_to(ROOT)}: {n} lines (at most {MAX_LINES})")
    assert not long, "modules over the line limit:\n" + "\n".join(long)


# --- e. the rooms import one way ---------------------------------------------------------------------

# (rooms the rule covers, prefixes they must never import, why)
# the rooms of emulator/ (tierlab.X for each module or folder of it): what traces/ and common/ never import
EMULATOR_ROOMS = tuple(sorted(f"tierlab.{p.stem}" for p in (ROOT / "emulator").iterdir()
                              if ((p.suffix == ".py" and p.stem not in ("__init__", "kernels"))
                                  or (p / "__init__.py").exists())))
LAYERS = (
    (("tierlab.traces", "tierlab.kernels"), EMULATOR_ROOMS, "a trace is chip-independent"),
    (("tierlab.common",), EMULATOR_ROOMS + ("tierlab.traces", "tierlab.kernels"),
     "common/ is the shared base"),
    (("tierlab.engine",), ("tierlab.cost", "tierlab.analysis", "tierlab.present", "tierlab.cli",
                            "tierlab.pipeline.chip_replay"), "the engine counts; it never costs or presents"),
    (("tierlab.chip",), ("tierlab.engine", "tierlab.cost", "tierlab.analysis", "tierlab.present",
                          "tierlab.cli"), "the chip is data the engine is given"),
    (("tierlab.cost",), ("tierlab.analysis", "tierlab.present", "tierlab.cli"), "cost comes before analysis"),
    (("tierlab.system",), ("tierlab.engine", "tierlab.network", "tierlab.cost", "tierlab.analysis",
                            "tierlab.present", "tierlab.cli"), "a system is data, as a chip is"),
    (("tierlab.network",), ("tierlab.engine", "tierlab.cost", "tierlab.analysis", "tierlab.present",
                             "tierlab.cli"), "collectives are counted from the system alone"),
    (("tierlab.analysis",), ("tierlab.present", "tierlab.cli"), "analyses compute; presentation shows"),
    (("tierlab.pipeline",), ("tierlab.analysis", "tierlab.present", "tierlab.cli", "tierlab.api"),
     "a replay counts; analyses and presentation read it"),
    # traces/ in rooms: a model is read, a workload is run on it, lowering writes both in the format
    (("tierlab.traces.model",), ("tierlab.traces.workload", "tierlab.traces.lowering", "tierlab.traces.format",
                                 "tierlab.traces.importers", "tierlab.traces.capture", "tierlab.kernels"),
     "a model spec is what a config says, before any run"),
    (("tierlab.traces.workload",), ("tierlab.traces.lowering", "tierlab.traces.importers", "tierlab.traces.capture"),
     "a workload is planned before it is lowered"),
    (("tierlab.traces.format",), ("tierlab.traces.workload", "tierlab.traces.lowering",
                                  "tierlab.traces.importers", "tierlab.traces.capture", "tierlab.kernels"),
     "the format is the contract every writer and reader shares"),
    (("tierlab.traces.importers",), ("tierlab.traces.model", "tierlab.traces.workload", "tierlab.traces.lowering",
                                     "tierlab.traces.capture"), "an address trace has no model"),
    (("tierlab.traces.lowering",), ("tierlab.traces.importers", "tierlab.traces.capture"),
     "the hand lowering stands without the importers and the capture"),
)
# run-time imports only (an annotation under ``if TYPE_CHECKING:`` may name a type from above)
RUNTIME_LAYERS = (
    (("tierlab.cost",), ("tierlab.pipeline",), "cost prices counts; the replay that makes them sits below it at "
     "run time (the PIM plan is the replay's, not cost's)"),
)


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_rooms_import_one_way():
    bad = []
    for mod in modules():
        for rooms, banned, why in LAYERS:
            if not any(within(mod, r) for r in rooms):
                continue
            for imp in imports(mod):
                dst = resolve(imp)
                hit = dst is not None and next((b for b in banned if within(dst, b)), None)
                if hit:
                    bad.append(f"{imp.where()}: {mod} imports {dst} ({hit} is off limits: {why})")
    for rooms, banned, why in RUNTIME_LAYERS:
        for mod in modules():
            if not any(within(mod, r) for r in rooms):
                continue
            for imp in imports(mod):
                dst = resolve(imp)
                hit = (dst is not None and not imp.type_checking
                       and next((b for b in banned if within(dst, b)), None))
                if hit:
                    bad.append(f"{imp.where()}: {mod} imports {dst} at run time ({hit} is off limits: {why})")
    assert not bad, "imports against the rooms' direction:\n" + "\n".join(bad)


# --- f. the README names every room ------------------------------------------------------------------

def readme_layout_paths() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Layout: where things live\s*$(.*?)(?=^## )", text, re.M | re.S)
    assert m, "README.md has no '## Layout: where things live' section"
    paths = set()
    for line in m.group(1).splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        first = line.strip("|").split("|")[0]
        for p in re.findall(r"`([^`]+)`", first):
            paths.add(p.strip().rstrip("/"))
    return paths


def test_readme_layout_names_every_room():
    paths = readme_layout_paths()
    rooms = ["common"] + sorted(
        f"emulator/{d.name}" for d in (ROOT / "emulator").iterdir()
        if d.is_dir() and (d / "__init__.py").exists())
    missing = [r for r in rooms if r not in paths]
    assert not missing, (f"README.md's layout table does not name {', '.join(r + '/' for r in missing)} "
                         f"(its path column names: {', '.join(sorted(paths))})")


# --- g. no room hides a function of the API ---------------------------------------------------------

def api_names() -> list[str]:
    """``tierlab.__all__``, read from emulator/__init__.py."""
    for node in tree("tierlab").body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    raise AssertionError("emulator/__init__.py defines no __all__")


def test_no_room_is_named_as_an_api_function():
    # importing tierlab.X binds the module to the name X on tierlab, over the function tierlab.X
    clash = [n for n in api_names() if f"tierlab.{n}" in modules()]
    assert not clash, (f"emulator/ has a module or package named as the API function(s) {', '.join(clash)}: "
                       "importing it replaces tierlab.<name> with the module")


# --- h. the library is the core; the CLI its shell --------------------------------------------------

def test_the_library_never_imports_the_cli():
    bad = [f"{imp.where()}: {mod} imports {dst}" for mod in modules() if not within(mod, "tierlab.cli")
           for imp in imports(mod) if (dst := resolve(imp)) is not None and within(dst, "tierlab.cli")]
    assert not bad, "the library imports the CLI (the CLI calls the library, never back):\n" + "\n".join(bad)


def test_only_the_cli_imports_click():
    bad = [f"{imp.where()}: {mod} imports {imp.base}" for mod in modules() if not within(mod, "tierlab.cli")
           for imp in imports(mod) if imp.base.split(".")[0] == "click"]
    assert not bad, "click is the CLI's alone:\n" + "\n".join(bad)

