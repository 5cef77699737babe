# Run by agentimage.Python with the interpreter to pack (python3 -I -c <this> entry
# appdir [venv-site-packages]): it reports the interpreter's layout and, from
# modulefinder, every module the entry script imports (statically) with its file, and
# the ones the script itself imports that cannot be found.
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
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "stdlib": stdlib,
    "dynload": dynload,
    "site_paths": site_paths,
    "modules": modules,
    "missing": missing,
}))
