"""Issue 65's check on train.py: it chooses its task in one line and imports no command-line
tool (its lines' width: tests/test_layout.py, with model.py and attention.py)."""
import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_train_chooses_its_task_in_one_line_and_imports_no_command_line_tool():
    # issue 65: the task is named once, outside the config's defaults and the imports; training's
    # data and held-out score come from the task's module, not from eval.py's command line
    src = open(os.path.join(ROOT, "train.py"), encoding="utf-8").read()
    tree = ast.parse(src)
    imported = {n.module if isinstance(n, ast.ImportFrom) else a.name
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    assert not imported & {"eval", "plot", "bench", "generate", "export", "gpu_check"}, imported
    lines = src.splitlines()
    config = [i for i, line in enumerate(lines) if line.startswith("# ----")][:2]
    imports = {n.lineno - 1 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    naming = [line for i, line in enumerate(lines)
              if not config[0] < i < config[1] and i not in imports
              and not line.lstrip().startswith("#")
              and re.search(r"mqar|MQAR|\bText\b", line)]
    assert naming == ['Task = MQAR if dataset == "mqar" else Text'], naming

