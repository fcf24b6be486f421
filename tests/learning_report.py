"""The table of `make test-learning`'s last results in model_zoo/README.md.

``python tests/learning_report.py [LOG]`` reads the JSON lines the learning tests wrote
(``runs/test-learning.jsonl``, the ``learning_bar`` fixture of tests/conftest.py), keeps the
last line of each test and metric, and rewrites the table between the markers of
model_zoo/README.md; a test missing from the log keeps its row.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from gluondet.files import atomic_write  # noqa: E402

README = os.path.join(ROOT, 'model_zoo', 'README.md')
BEGIN, END = '<!-- test-learning: begin -->', '<!-- test-learning: end -->'
HEADER = ('| test | metric | value | bar | minutes | date | commit |\n'
          '|---|---|---|---|---|---|---|\n')


def rows_of(table):
    """``{(test, metric): row line}`` of a table written by `report`."""
    found = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if line.startswith('| `') and len(cells) == 7:
            found[(cells[0].strip('`'), cells[1])] = line
    return found


def report(log, readme=README):
    """Rewrite ``readme``'s table with the last result of each test in ``log``."""
    with open(readme, encoding='utf-8') as f:
        page = f.read()
    match = re.search(re.escape(BEGIN) + r'\n(.*?)' + re.escape(END), page, re.S)
    if match is None:
        raise SystemExit('%s: no %s ... %s block' % (readme, BEGIN, END))
    rows = rows_of(match.group(1))
    if not os.path.isfile(log):
        raise SystemExit('%s: no results (no learning test ran)' % log)
    with open(log, encoding='utf-8') as f:
        for line in f:
            r = json.loads(line)
            rows[(r['test'], r['metric'])] = '| `%s` | %s | %.4f | %s | %.1f | %s | %s |' % (
                r['test'], r['metric'], r['value'], r['bar'], r['minutes'], r['date'],
                r['commit'])
    table = HEADER + '\n'.join(rows[k] for k in sorted(rows)) + '\n'
    atomic_write(readme, page[:match.start(1)] + table + page[match.end(1):])
    print('%s: %d results' % (os.path.relpath(readme, ROOT), len(rows)))


if __name__ == '__main__':
    report(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, 'runs',
                                                              'test-learning.jsonl'))
