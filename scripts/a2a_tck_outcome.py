"""The A2A TCK's per-test outcome, kept in the repository and checked (scripts/a2a_tck.sh runs it).

    python a2a_tck_outcome.py REPORT[,REPORT...] OUTCOME [--expected LIST] [--reference OUTCOME] [--update]

REPORT is pytest-json-report's file of one run (several, comma-separated, for one run made of
several pytest processes: their tests taken together). OUTCOME (conformance/a2a-tck.txt) holds one test a
line, `<test id> <outcome>` (passed, failed, skipped; xfailed or xpassed should the TCK mark any),
sorted by id; a test that errs in its setup counts as failed.

LIST (conformance/a2a-tck-expected-failures.txt) names each test expected to fail, its reason
indented on the lines below it:

    tests/mandatory/test_x.py::test_y
        tck: what the test gets wrong (a2a-sdk's own server fails it too)
    tests/mandatory/test_x.py::test_z
        ours: what we do wrong, to fix

`tck:` is the suite's own defect, which the run against a2a-sdk's server (REFERENCE,
conformance/a2a-tck-reference.txt) must show failing too; `ours:` is ours to fix.

Without --update, the run must match: the tests that fail are exactly those listed, each listed one
has a reason, and every other test has the outcome OUTCOME gives it (a test that passed and now
skips, or one that came or went, is a change too). Anything else exits 1, saying what.

With --update, OUTCOME is rewritten from the run and LIST follows it: a listed test that now passes
is dropped (and named), a new failure is added with the reason `TODO`, which the check refuses until
someone writes one. Exits 0 after an update.
"""

import argparse
import json
import sys
import textwrap
from pathlib import Path

KINDS = ("tck:", "ours:")


def outcomes_of_report(paths):
    outcomes = {}
    for path in paths.split(","):
        report = json.loads(Path(path).read_text())
        for test in report.get("tests", []):
            outcome = test["outcome"]
            outcomes[test["nodeid"]] = "failed" if outcome == "error" else outcome
    return outcomes


def read_outcomes(path):
    outcomes = {}
    for line in Path(path).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test, outcome = line.rsplit(" ", 1)
            outcomes[test] = outcome
    return outcomes


def read_expected(path):
    """The listed tests, in order, each with its reason (lines joined)."""
    expected = {}
    current = None
    for line in Path(path).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace():
            if current is None:
                raise SystemExit(f"{path}: a reason before any test: {line.strip()!r}")
            expected[current] = (expected[current] + " " + line.strip()).strip()
        else:
            current = line.strip()
            expected[current] = ""
    return expected


def summary(outcomes):
    counts = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    order = ["passed", "failed", "skipped", "xfailed", "xpassed"]
    words = [f"{counts.pop(k)} {k}" for k in order if k in counts]
    words += [f"{n} {k}" for k, n in sorted(counts.items())]
    return ", ".join(words) or "no tests"


def write_outcomes(path, outcomes, header):
    lines = [f"# {line}" if line else "#" for line in header]
    lines.append(f"# {summary(outcomes)}")
    lines += [f"{test} {outcomes[test]}" for test in sorted(outcomes)]
    Path(path).write_text("\n".join(lines) + "\n")


def write_expected(path, expected):
    text = Path(path).read_text() if Path(path).exists() else ""
    head = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            head.append(line)
        else:
            break
    while head and not head[-1].strip():
        head.pop()
    body = []
    for test in sorted(expected):
        body.append(test)
        body += ["    " + line for line in textwrap.wrap(expected[test] or "TODO", 96)]
    Path(path).write_text("\n".join(head + ([""] if head else []) + body) + "\n")


def header_of(path):
    """The comment lines that open an outcome file, less its closing count."""
    if not Path(path).exists():
        return []
    lines = [l[2:] if l.startswith("# ") else l[1:] for l in Path(path).read_text().splitlines() if l.startswith("#")]
    return lines[:-1] if lines else []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("outcome")
    parser.add_argument("--expected")
    parser.add_argument("--reference")
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--header", action="append", default=[], help="a line for the outcome file's head")
    args = parser.parse_args()

    run = outcomes_of_report(args.report)
    if not run:
        print(f"a2a-tck: the run reported no test ({args.report})", file=sys.stderr)
        return 1
    failed = {t for t, o in run.items() if o in ("failed", "xpassed")}
    print(f"a2a-tck: {summary(run)}")

    if args.update:
        write_outcomes(args.outcome, run, args.header or header_of(args.outcome))
        print(f"a2a-tck: wrote {args.outcome}")
        if args.expected:
            expected = read_expected(args.expected) if Path(args.expected).exists() else {}
            fixed = sorted(t for t in expected if t not in failed)
            new = sorted(failed - expected.keys())
            kept = {t: r for t, r in expected.items() if t in failed}
            kept.update({t: "" for t in new})
            write_expected(args.expected, kept)
            for test in fixed:
                print(f"a2a-tck: expected to fail, now {run.get(test, 'gone')} (dropped from the list): {test}")
            for test in new:
                print(f"a2a-tck: a new failure, listed with reason TODO (write one): {test}")
            print(f"a2a-tck: wrote {args.expected} ({len(kept)} expected failures)")
        return 0

    problems = []
    if args.expected:
        expected = read_expected(args.expected)
        for test in sorted(failed - expected.keys()):
            problems.append(f"a new failure (not in {args.expected}): {test}")
        for test in sorted(t for t in expected if t not in failed):
            problems.append(f"expected to fail, now {run.get(test, 'gone from the run')}: {test}")
        reference = read_outcomes(args.reference) if args.reference and Path(args.reference).exists() else None
        for test, reason in sorted(expected.items()):
            if not reason.startswith(KINDS):
                problems.append(f"no reason (`tck: ...` or `ours: ...`) in {args.expected}: {test}")
            elif reason.startswith("tck:") and reference is not None and reference.get(test) != "failed":
                problems.append(
                    f"called the TCK's defect, but a2a-sdk's server has it {reference.get(test, 'not run')} "
                    f"({args.reference}): {test}"
                )
    kept = read_outcomes(args.outcome) if Path(args.outcome).exists() else {}
    for test in sorted(run.keys() | kept.keys()):
        was, now = kept.get(test, "absent"), run.get(test, "absent")
        # A failure's coming or going is the expected list's to judge, where there is one.
        if was != now and not (args.expected and (test in failed or was == "failed")):
            problems.append(f"{was} in {args.outcome}, now {now}: {test}")

    if problems:
        print(f"a2a-tck: the run differs from what the repository holds ({len(problems)}):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        report = json.loads(Path(args.report).read_text())
        for test in report.get("tests", []):
            if any(p.endswith(": " + test["nodeid"]) for p in problems):
                for stage in ("setup", "call", "teardown"):
                    text = (test.get(stage) or {}).get("longrepr")
                    if text:
                        print(f"\n--- {test['nodeid']} ({stage})\n{text}", file=sys.stderr)
        print(
            "\nIf the change is meant (a fix, or a new defect found and explained): `make test-a2a UPDATE=1`, "
            "give each new failure its reason, and commit conformance/.",
            file=sys.stderr,
        )
        return 1
    print(f"a2a-tck: as {args.outcome} and {args.expected or 'no expected list'} say")
    return 0


if __name__ == "__main__":
    sys.exit(main())
