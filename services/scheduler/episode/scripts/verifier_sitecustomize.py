# Corral's verifier (docs/reward-integrity.md): imported by every Python the verifier starts, from a directory the
# scheduler makes fresh before it runs. The verifier runs with PYTHONSAFEPATH, so neither the working directory
# nor the script's directory comes first on the path, where a file the agent left (pytest.py, json.py) would
# shadow an installed module. Both are searched last instead: the code under test still imports by name, and an
# installed module always wins. Then the interpreter's own sitecustomize, if it has one, runs as it would have.
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_before = [p for p in sys.path if p and p != _here]
_last = [os.getcwd()]
if sys.argv and sys.argv[0] not in ("", "-", "-c", "-m"):
    _last.append(os.path.dirname(os.path.abspath(sys.argv[0])))
for _dir in _last:
    if _dir not in sys.path:
        sys.path.append(_dir)

_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _before)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    try:
        _spec.loader.exec_module(_module)
    except Exception:  # as Python treats a failing sitecustomize: reported, not fatal
        import traceback

        traceback.print_exc()
