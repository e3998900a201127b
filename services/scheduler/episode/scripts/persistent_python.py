# The persistent python tool's driver (persistent_tools.cc): each NUL-terminated cell on stdin runs in one
# globals dict, the last expression echoed like Jupyter; the per-process marker follows its output.
import ast, os, sys, traceback
try:  # started fork-ready (a branching task): a fork carries this interpreter, its variables, into each branch
    import corral_carry
    corral_carry.ready()
except ImportError:
    pass
mark = os.environ.pop("__CORRAL_MARK")
sys.stderr = sys.stdout
g = {"__name__": "__main__", "__builtins__": __builtins__}
inp = sys.stdin.buffer
def cell():
    data = bytearray()
    while True:
        b = inp.read(1)
        if not b:
            return None
        if b == b"\0":
            return data.decode("utf-8", "replace")
        data += b
while True:
    try:
        src = cell()
    except KeyboardInterrupt:
        continue
    if src is None:
        break
    try:
        tree = ast.parse(src, "<cell>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), g)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), g)
            if value is not None:
                print(repr(value))
    except KeyboardInterrupt:
        print("[interrupted]")
    except BaseException:
        traceback.print_exc()
    sys.stdout.write("\n" + mark + "\n")
    sys.stdout.flush()
