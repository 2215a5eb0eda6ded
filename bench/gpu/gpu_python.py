"""The Python packages the GPU scripts need, checked before they spend any GPU time.

The scripts (tests/gpu/hf_compare.py, bench/gpu/sdpa_bench.py, bench/gpu/hf_generate_bench.py)
were written against the versions in VERIFIED, read from those libraries' sources (docs/gpu-todo.md
says which revisions). `require(names)` imports the packages, prints one line with their versions
(so every log says what ran) and exits with status 2 and a message naming the package when one is
missing or outside SUPPORTED. A version inside SUPPORTED but different from VERIFIED is run, with a
note on stderr: the window is too rare to refuse a patch release.

The version arithmetic (`parse_version`, `check_versions`) needs no third-party package, so the
tests run it without torch.
"""
import importlib
import re
import sys

# What the scripts were checked against (the GPU machine's packages).
VERIFIED = {"torch": "2.11.0", "transformers": "5.17.0", "safetensors": "0.8.0"}
# Accepted ranges, [lowest, first refused): torch >= 2.5 has torch.nn.attention.sdpa_kernel and
# SDPBackend; transformers 5 has LlamaConfig(rope_parameters=...), from_pretrained(dtype=...) and
# writes "dtype" and "rope_parameters" in config.json; 4.x spells all three differently.
SUPPORTED = {
    "torch": ((2, 5), (3, 0)),
    "transformers": ((5, 0), (6, 0)),
    "safetensors": ((0, 4), (1, 0)),
}


def parse_version(text):
    """'2.11.0+cu130' -> (2, 11, 0); '5.17.0.dev0' -> (5, 17, 0); None when unreadable."""
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text))
    if not m:
        return None
    return tuple(int(g) if g is not None else 0 for g in m.groups())


def check_versions(found):
    """found: {name: version string or None (not importable)}.

    Returns (errors, notes): errors are reasons to refuse to run, notes differences worth a line.
    """
    errors, notes = [], []
    for name, text in found.items():
        if text is None:
            errors.append(f"{name} is not importable by {sys.executable}; the GPU scripts need "
                          f"{name} {VERIFIED.get(name, '')} (set SERVELAB_GPU_PYTHON to an "
                          f"interpreter that has it)")
            continue
        v = parse_version(text)
        low, high = SUPPORTED.get(name, ((0,), (10**9,)))
        if v is None:
            errors.append(f"{name}: cannot read its version '{text}'")
        elif not (low <= v[:len(low)] and v[:len(high)] < high):
            errors.append(f"{name} {text} is not supported: expected "
                          f">= {'.'.join(map(str, low))} and < {'.'.join(map(str, high))} "
                          f"(checked against {VERIFIED.get(name, '?')})")
        elif name in VERIFIED and v[:3] != parse_version(VERIFIED[name])[:3]:
            notes.append(f"{name} {text} differs from the {VERIFIED[name]} these scripts were "
                         f"checked against")
    return errors, notes


def require(names, script):
    """Imports `names`, prints their versions, exits 2 when one is missing or unsupported.

    Returns {name: module}.
    """
    modules, found = {}, {}
    for name in names:
        try:
            modules[name] = importlib.import_module(name)
            found[name] = getattr(modules[name], "__version__", None) or "unknown"
        except ImportError as e:
            found[name] = None
            print(f"{script}: cannot import {name}: {e}", file=sys.stderr)
    errors, notes = check_versions(found)
    print(f"{script}: python {sys.version.split()[0]}, " +
          ", ".join(f"{n} {found[n] or 'missing'}" for n in names), flush=True)
    for n in notes:
        print(f"{script}: note: {n}", file=sys.stderr)
    if errors:
        for e in errors:
            print(f"{script}: error: {e}", file=sys.stderr)
        sys.exit(2)
    return modules


def require_cuda(torch, script):
    """Exits 2 with a message when torch sees no CUDA device; prints the device otherwise."""
    if not torch.cuda.is_available():
        print(f"{script}: error: torch {torch.__version__} sees no CUDA device "
              f"(torch.version.cuda = {torch.version.cuda})", file=sys.stderr)
        sys.exit(2)
    print(f"{script}: device {torch.cuda.get_device_name()}, CUDA {torch.version.cuda}",
          flush=True)
