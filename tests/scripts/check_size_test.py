"""scripts/check-size on small trees made here: what it refuses, named, and what it lets through."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "check-size")


def function(name, body_lines):
    return "int %s(int x) {\n%s}\n" % (name, "".join("  x += %d;\n" % i for i in range(body_lines)))


class CheckSize(unittest.TestCase):
    def check(self, files):
        root = tempfile.mkdtemp(prefix="corral-check-size-")
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        r = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True, timeout=30)
        return r.returncode, r.stderr

    def test_files_and_functions_within_their_limits_pass(self):
        files = {"libs/a/a.cc": function("Short", 98) + "\n" * 300, "libs/a/a.h": "#pragma once\n" * 250}
        self.assertEqual(self.check(files), (0, ""))

    def test_a_long_source_header_or_function_is_refused_by_name(self):
        code, err = self.check({"libs/a/big.cc": "\n" * 501, "libs/a/big.h": "\n" * 251,
                                "libs/a/f.cc": "namespace x {\n\n" + function("Long", 99) + "\n}  // namespace x\n"})
        self.assertEqual(code, 1)
        self.assertIn("libs/a/big.cc has 501 lines (at most 500)", err)
        self.assertIn("libs/a/big.h has 251 lines (at most 250)", err)
        self.assertIn("libs/a/f.cc:3 Long has 101 lines (at most 100)", err)

    def test_tests_are_not_measured(self):
        self.assertEqual(self.check({"libs/a/tests/a_test.cc": function("Long", 400),
                                     "tests/integration/b_test.cc": "\n" * 900}), (0, ""))

    def test_a_listed_file_that_shrank_must_leave_the_list(self):
        code, err = self.check({"services/proxy/policy.cc": function("ApplyPolicy", 10),
                                "scripts/check-size.known": "# paid off since\nservices/proxy/policy.cc:ApplyPolicy\n"})
        self.assertEqual(code, 1)
        self.assertIn("services/proxy/policy.cc:ApplyPolicy is within its limit now", err)


if __name__ == "__main__":
    unittest.main()
