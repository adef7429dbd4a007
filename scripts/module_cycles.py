"""Fails when the modules of a crate of the workspace import each other in a cycle.

A module is a source file (`foo.rs`, or a folder's `mod.rs`); its imports are the `crate::…`
and `super::…` paths in its code (comments and `#[cfg(test)] mod tests` left out), each taken
to the deepest module it names. `make lint` runs it.

Usage: python3 scripts/module_cycles.py
"""

import os
import re
import sys
from collections import defaultdict

CRATES = {
    "agent-worker": "src",
    "agent-worker-contract": "crates/agent-worker-contract/src",
    "agent-worker-core": "crates/agent-worker-core/src",
    "agent-worker-aws": "crates/agent-worker-aws/src",
    "agent-worker-models": "crates/agent-worker-models/src",
    "agent-worker-http": "crates/agent-worker-http/src",
    "agent-worker-agent-protocol": "crates/agent-worker-agent-protocol/src",
    "agent-worker-testkit": "crates/agent-worker-testkit/src",
    "agent-worker-runtime": "crates/agent-worker-runtime/src",
    "agent-worker-container": "crates/agent-worker-container/src",
    "agent-worker-lambda": "crates/agent-worker-lambda/src",
}


def module_of(root, path):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def imports(crate, root):
    files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".rs")]
    modules = {module_of(root, f): f for f in files if "bin" not in module_of(root, f)[:1]}
    graph = defaultdict(set)
    for module, path in modules.items():
        if module and module[-1] == "tests":
            continue
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"#\[cfg\(test\)\]\s*mod tests \{.*", "", text, flags=re.S)
        code = "\n".join(line for line in text.split("\n") if not line.strip().startswith("//"))
        found_paths = re.findall(r"\b(?:crate|super)(?:::[a-z_0-9]+)+", code)
        # `use super::{a, b::C, d::{E, F}}`: each item of a group is a path of its own.
        groups = re.finditer(r"\b((?:crate|super)(?:::[a-z_0-9]+)*)::\{((?:[^{}]|\{[^{}]*\})*)\}", code)
        for prefix, group in ((m.group(1), m.group(2)) for m in groups):
            for item in re.findall(r"(?:^|,)\s*([a-z_0-9]+)\b", group):
                if item != "self":
                    found_paths.append(f"{prefix}::{item}")
        for found in found_paths:
            parts = found.split("::")
            if parts[0] == "crate":
                target = parts[1:]
            else:
                base, i = list(module), 0
                while i < len(parts) and parts[i] == "super":
                    base, i = base[:-1], i + 1
                target = base + parts[i:]
            while target and tuple(target) not in modules:
                target = target[:-1]
            target = tuple(target)
            if target and target != module and module[: len(target)] != target:
                graph[module].add(target)
    return graph


def cycles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted("::".join(m) for m in component))

    sys.setrecursionlimit(10_000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main():
    failed = False
    for crate, root in CRATES.items():
        for component in cycles(imports(crate, root)):
            failed = True
            print(f"{crate}: modules import each other in a cycle: {', '.join(component)}")
    if failed:
        sys.exit(1)
    print(f"no import cycle in {len(CRATES)} crates")


if __name__ == "__main__":
    main()
