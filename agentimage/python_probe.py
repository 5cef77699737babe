# Run by agentimage.Python with the interpreter to pack (python3 -I -c <this> entry
# appdir [venv-site-packages]): it reports the interpreter's layout and, from
# modulefinder, every module the entry script imports (statically) with its file, and
# the ones the script itself imports that cannot be found, and the modules it imports
# only where it handles their absence (guarded).
import ast
import json
import modulefinder
import os
import sys
import sysconfig

entry, appdir, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
stdlib = sysconfig.get_paths()["stdlib"]
dynload = sysconfig.get_config_var("DESTSHARED") or ""
site_paths = [p for p in sys.path if p.endswith("-packages") and os.path.isdir(p)]
finder = modulefinder.ModuleFinder(path=[appdir] + extra + sys.path)
finder.run_script(entry)
modules = {n: m.__file__ for n, m in finder.modules.items() if getattr(m, "__file__", None)}
missing = sorted(n for n, who in finder.badmodules.items() if "__main__" in who)

# Modules imported inside a try whose handlers catch their absence (ImportError,
# ModuleNotFoundError, Exception, BaseException, or a bare except): the script runs
# without them.
ABSENCE = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def catches_absence(handler):
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for t in types:
        name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None
        if name in ABSENCE:
            return True
    return False


guarded = set()
with open(entry, "rb") as f:
    tree = ast.parse(f.read(), entry)
tries = tuple(t for t in (getattr(ast, "Try", None), getattr(ast, "TryStar", None)) if t)
for node in ast.walk(tree):
    if isinstance(node, tries) and any(catches_absence(h) for h in node.handlers):
        for stmt in node.body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Import):
                    guarded.update(a.name for a in sub.names)
                elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
                    guarded.add(sub.module)
                    guarded.update(sub.module + "." + a.name for a in sub.names)
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "stdlib": stdlib,
    "dynload": dynload,
    "site_paths": site_paths,
    "modules": modules,
    "missing": missing,
    "guarded": sorted(guarded),
}))
