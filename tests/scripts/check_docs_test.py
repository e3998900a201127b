"""scripts/check-docs on a small tree made here: what it refuses, named, and what it lets through."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "check-docs")

ARCHITECTURE = """# Architecture
| part | binary / package | owns | talks to |
|---|---|---|---|
| scheduler | `corral-scheduler` | batches | hosts |
| CLI | `corral` | `up` (a cluster), `run` | every service |

The scheduler's table is `services/scheduler/table.cc`; see [the README](../README.md).
"""


class CheckDocs(unittest.TestCase):
    def tree(self, architecture=ARCHITECTURE, readme="# Corral\n`tests/test.sh` is a task's verifier.\n"):
        root = tempfile.mkdtemp(prefix="corral-check-docs-")
        files = {
            "README.md": readme,
            "docs/architecture.md": architecture,
            "services/scheduler/table.cc": "",
            "services/scheduler/CMakeLists.txt": "add_executable(corral-scheduler main.cc)\n",
            "tools/corral/CMakeLists.txt": "add_executable(corral main.cc)\nadd_executable(corral-bench-x b.cc)\n",
            "tools/corral/up.cc": 'auto* up = app.add_subcommand("up", "start");\n',
            "tools/corral/run.cc": 'auto* run = app.add_subcommand(\n    "run", "a dataset");\n'
                                   'auto* ls = run->add_subcommand("ls", "not a top-level command");\n',
        }
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        return root

    def check(self, root):
        r = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True, timeout=30)
        return r.returncode, r.stderr

    def test_docs_that_match_the_code_pass(self):
        self.assertEqual(self.check(self.tree()), (0, ""))

    def test_a_named_path_that_is_gone_is_refused_with_its_line(self):
        root = self.tree(readme="# Corral\n\nSee `services/proxy/gone.cc:12` and `bench/*.sh`.\n")
        code, err = self.check(root)
        self.assertEqual(code, 1)
        self.assertIn("README.md:3 names `services/proxy/gone.cc:12`", err)
        self.assertIn("README.md:3 names `bench/*.sh`", err)

    def test_a_dead_relative_link_is_refused(self):
        code, err = self.check(self.tree(readme="# Corral\n[threads](docs/threading.md#clock)\n"))
        self.assertEqual(code, 1)
        self.assertIn("README.md:2 links to docs/threading.md#clock", err)

    def test_the_cli_row_must_list_exactly_the_registered_commands(self):
        architecture = ARCHITECTURE.replace("`up` (a cluster), `run`", "`up` (a cluster), `top`")
        code, err = self.check(self.tree(architecture=architecture))
        self.assertEqual(code, 1)
        self.assertIn("the CLI row does not list `corral run`", err)
        self.assertIn("the CLI row lists `corral top`, which the CLI does not have", err)
        self.assertNotIn("`corral ls`", err)

    def test_the_parts_table_must_name_each_service_binary_and_no_other(self):
        architecture = ARCHITECTURE.replace("`corral-scheduler`", "`corral-planner`")
        code, err = self.check(self.tree(architecture=architecture))
        self.assertEqual(code, 1)
        self.assertIn("does not name the binary corral-scheduler", err)
        self.assertIn("names corral-planner, which the build does not make", err)
        self.assertNotIn("corral-bench-x", err)


if __name__ == "__main__":
    unittest.main()
