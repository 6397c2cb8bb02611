"""roll's built-in terminal tasks, in three tiers; each draws its data from the episode's seed and
knows its solution (the scripted solver's commands).

tier 1  one command answers it (count lines, sum a column, count matches): ``submit ANSWER``
tier 2  a few commands change files (sort into a file, edit a setting, tidy a directory): ``submit``
tier 3  find and fix the bug that fails a small package's tests or crashes a script: ``submit``
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import numpy as np

from roll_env_terminal.tasks import Check, Task

WORDS = ("apple", "river", "stone", "cloud", "maple", "ember", "frost", "delta", "orbit", "quill", "cedar", "lumen")
NAMES = ("Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kemal", "Lena",
         "Mira", "Nils", "Oona", "Pavel")


def _pick(rng: np.random.Generator, items: tuple[str, ...], n: int) -> list[str]:
    return [items[i] for i in rng.choice(len(items), size=n, replace=False)]


# -- tier 1 ----------------------------------------------------------------------------------------
def count_lines(rng: np.random.Generator) -> Task:
    n = int(rng.integers(5, 30))
    lines = [" ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), size=3)) for _ in range(n)]
    return Task(f"count_lines-{n}", "How many lines does data.txt have? Answer with: submit NUMBER",
                {"data.txt": "\n".join(lines) + "\n"}, Check(answer=str(n)), 1, ("wc -l data.txt", f"submit {n}"))


def sum_column(rng: np.random.Generator) -> Task:
    amounts = [int(a) for a in rng.integers(1, 100, size=int(rng.integers(4, 10)))]
    rows = "".join(f"{item},{a}\n" for item, a in zip(_pick(rng, WORDS, len(amounts)), amounts))
    return Task(f"sum_column-{sum(amounts)}", "What is the sum of the amount column of sales.csv? Answer with: "
                "submit NUMBER", {"sales.csv": "item,amount\n" + rows}, Check(answer=str(sum(amounts))), 1,
                ("awk -F, 'NR > 1 { s += $2 } END { print s }' sales.csv", f"submit {sum(amounts)}"))


def count_errors(rng: np.random.Generator) -> Task:
    levels = [("ERROR", "WARN", "INFO")[int(i)] for i in rng.integers(0, 3, size=int(rng.integers(8, 20)))]
    log = "".join(f"12:{i:02d} {level} {WORDS[i % len(WORDS)]} done\n" for i, level in enumerate(levels))
    errors = levels.count("ERROR")
    return Task(f"count_errors-{errors}", "How many lines of app.log contain ERROR? Answer with: submit NUMBER",
                {"app.log": log}, Check(answer=str(errors)), 1, ("grep -c ERROR app.log", f"submit {errors}"))


# -- tier 2 ----------------------------------------------------------------------------------------
def sort_names(rng: np.random.Generator) -> Task:
    names = _pick(rng, NAMES, int(rng.integers(5, 10)))
    return Task("sort_names", "Write the names of names.txt to sorted.txt, sorted alphabetically, one per line. "
                "Then answer: submit", {"names.txt": "\n".join(names) + "\n"},
                Check(file="sorted.txt", equals="\n".join(sorted(names))), 2, ("sort names.txt > sorted.txt", "submit"))


def set_port(rng: np.random.Generator) -> Task:
    port = int(rng.integers(2000, 9000))
    config = "[server]\nhost = 127.0.0.1\nport = 8080\nworkers = 4\n"
    check = ("import configparser\nc = configparser.ConfigParser()\nc.read('config.ini')\n"
             f"assert dict(c['server']) == {{'host': '127.0.0.1', 'port': '{port}', 'workers': '4'}}\n")
    return Task(f"set_port-{port}", f"Change the port in config.ini to {port}, keeping every other setting. Then "
                "answer: submit", {"config.ini": config},
                Check(command="python3 -I check_config.py", check_files={"check_config.py": check}), 2,
                (f"sed -i 's/^port = .*/port = {port}/' config.ini", "submit"))


def archive_logs(rng: np.random.Generator) -> Task:
    logs = [f"{w}.log" for w in _pick(rng, WORDS, int(rng.integers(2, 5)))]
    files = {name: f"log of {name}\n" for name in logs} | {"notes.txt": "keep me here\n"}
    check = (f"test -z \"$(ls *.log 2>/dev/null)\" && test -f notes.txt && "
             f"test \"$(ls archive | tr '\\n' ' ')\" = \"{' '.join(sorted(logs))} \"")
    return Task("archive_logs", "Move every .log file into a new directory named archive; leave the other files "
                "where they are. Then answer: submit", files, Check(command=check), 2,
                ("mkdir -p archive && mv *.log archive/", "submit"))


# -- tier 3 ----------------------------------------------------------------------------------------
STATS = '''\
"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty list."""
    total = sum(values)
    return total / len(values)


def median(values):
    """The middle value (the mean of the two middle ones for an even count)."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def clamp(value, low, high):
    """value limited to [low, high]."""
    return max(low, min(value, high))


def normalize(values):
    """values scaled to sum to 1."""
    total = sum(values)
    return [v / total for v in values]
'''
STATS_TESTS = '''\
import unittest

from stats import clamp, mean, median, normalize


class CoreTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 6]), 3)

    def test_median(self):
        self.assertEqual(median([5, 1, 3]), 3)
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_clamp(self):
        self.assertEqual(clamp(5, 0, 3), 3)
        self.assertEqual(clamp(-1, 0, 3), 0)

    def test_normalize(self):
        self.assertEqual(normalize([1, 3]), [0.25, 0.75])
'''
#: (correct line, buggy line, the sed command that fixes it)
STATS_BUGS = (
    ("return total / len(values)", "return total / (len(values) - 1)",
     "sed -i 's|total / (len(values) - 1)|total / len(values)|' stats/core.py"),
    ("return ordered[mid]", "return ordered[mid + 1]", "sed -i 's|ordered\\[mid + 1\\]|ordered[mid]|' stats/core.py"),
    ("return max(low, min(value, high))", "return min(low, max(value, high))",
     "sed -i 's|min(low, max(value, high))|max(low, min(value, high))|' stats/core.py"),
)


def fix_stats(rng: np.random.Generator) -> Task:
    variant = int(rng.integers(len(STATS_BUGS)))
    good, bad, fix = STATS_BUGS[variant]
    files = {"stats/__init__.py": "from stats.core import clamp, mean, median, normalize\n",
             "stats/core.py": STATS.replace(good, bad, 1), "tests/__init__.py": "",
             "tests/test_core.py": STATS_TESTS}
    return Task(f"fix_stats-{variant}", "The tests of the stats package fail (run: python3 -m unittest). Fix the bug "
                "in stats/core.py without changing the tests. Then answer: submit", files,
                Check(command="python3 -m unittest -q", check_files={"tests/test_core.py": STATS_TESTS}), 3,
                ("python3 -m unittest 2>&1 | tail -n 8", fix, "python3 -m unittest -q", "submit"))


REPORT = textwrap.dedent('''\
    """Print the total of the amount column of data.csv."""
    import csv


    def total(path):
        with open(path) as f:
            rows = list(csv.reader(f))
        return sum(int(row[1]) for row in rows)


    if __name__ == "__main__":
        print(total("data.csv"))
''')


def fix_report(rng: np.random.Generator) -> Task:
    amounts = [int(a) for a in rng.integers(1, 50, size=4)]
    hidden = [int(a) for a in rng.integers(1, 50, size=3)]
    data = "name,amount\n" + "".join(f"{w},{a}\n" for w, a in zip(_pick(rng, WORDS, 4), amounts))
    check_data = "name,amount\n" + "".join(f"x{i},{a}\n" for i, a in enumerate(hidden))
    check = f"from report import total\nassert total('check_data.csv') == {sum(hidden)}\n"
    return Task("fix_report", "python3 report.py should print the total of the amount column of data.csv, but it "
                "crashes. Fix report.py. Then answer: submit", {"report.py": REPORT, "data.csv": data},
                Check(command=f"python3 check_report.py && test \"$(python3 report.py)\" = {sum(amounts)}",
                      check_files={"check_report.py": check, "check_data.csv": check_data}), 3,
                ("python3 report.py", "sed -i 's|for row in rows)|for row in rows[1:])|' report.py", "python3 report.py",
                 "submit"))


#: tier -> the task makers of that tier
BUILTIN: dict[int, tuple[Callable[[np.random.Generator], Task], ...]] = {
    1: (count_lines, sum_column, count_errors),
    2: (sort_names, set_port, archive_logs),
    3: (fix_stats, fix_report),
}
