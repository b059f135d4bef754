"""The jit/ <-> compiler/ boundary: the front end reaches the backends only through
jit/backend.py, so the two packages do not import each other (see its docstring)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "tracejit"


def _imports(path: Path) -> set:
    """Absolute names of the modules `path` imports, at module level or inside functions."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.rsplit(".", 1)[0]  # (for __init__.py too: "tracejit.jit.__init__")
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names)  # `from .. import compiler`
    return out


def _is_compiler(name: str) -> bool:
    return name == "tracejit.compiler" or name.startswith("tracejit.compiler.")


def test_only_jit_backend_imports_the_compiler_package():
    found = {}
    for path in sorted((PKG / "jit").glob("*.py")):
        hits = sorted(n for n in _imports(path) if _is_compiler(n))
        if hits:
            found[path.name] = hits
    assert found == {"backend.py": ["tracejit.compiler"]}, (
        f"jit/ modules importing compiler/ (only backend.py may, and only the package, which "
        f"registers its backend): {found}")


def test_the_import_scan_sees_relative_and_function_level_imports(tmp_path):
    d = tmp_path / "tracejit" / "jit"
    d.mkdir(parents=True)
    f = d / "probe.py"
    f.write_text("def g():\n    from ..compiler.tiers import wait\n    from .. import compiler\n")
    names = {n for n in _imports_rooted(f, tmp_path) if _is_compiler(n)}
    assert names == {"tracejit.compiler.tiers", "tracejit.compiler.tiers.wait", "tracejit.compiler"}


def _imports_rooted(path: Path, root: Path) -> set:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return _imports(path)
    finally:
        ROOT = saved


def test_compiler_modules_use_the_ir_passes_from_jit_not_their_own_copies():
    # autodiff and lift_symbolic_literals are IR-to-IR transforms: they live in jit/.
    assert not (PKG / "compiler" / "autodiff.py").exists()
    for path in (PKG / "compiler").glob("*.py"):
        assert "def lift_symbolic_literals" not in path.read_text(), path.name


def test_importing_tracejit_and_interpreting_do_not_load_the_backend():
    # The CPU backend's registered implementations (compiler/cpu/) join at import; the
    # compiler itself (plans, executors, tiers, workers) and numba do not.
    code = (
        "import sys, tracejit as tj\n"
        "COMPILER = ('tracejit.compiler.plan', 'tracejit.compiler.executor', 'tracejit.compiler.tiers',\n"
        "            'tracejit.compiler.workers', 'tracejit.compiler.loopnest', 'numba')\n"
        "loaded = lambda: [m for m in COMPILER if m in sys.modules]\n"
        "assert not loaded(), f'import tracejit loaded {loaded()}'\n"
        "f = tj.trace(lambda x: x * 2, compiler='interpret')\n"
        "f(tj.ones(2))\n"
        "assert not loaded(), f'an interpreted entry loaded {loaded()}'\n"
        "from tracejit.jit import backend\n"
        "b = backend.get('numba')\n"
        "assert b is not None and b.name == 'numba' and 'tracejit.compiler' in sys.modules\n"
        "assert isinstance(b, backend.Compiler)\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TRACEJIT_CACHE": "0"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr


def test_every_jit_module_is_short_and_says_what_it_holds():
    for path in sorted((PKG / "jit").glob("*.py")):
        text = path.read_text()
        assert ast.get_docstring(ast.parse(text)), f"{path.name} has no module docstring"
        assert text.count("\n") <= 600, f"{path.name} has {text.count(chr(10))} lines (split it)"
