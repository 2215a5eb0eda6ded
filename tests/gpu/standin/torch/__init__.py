"""Stand-in for the subset of torch that tests/gpu/hf_compare.py calls (see ../README.md).

Tensors are flat lists of Python floats with a shape; bfloat16 rounds to nearest even
(hf_checkpoint.bf16_bits). There is no CUDA here: cuda.is_available() is False, or True with
STANDIN_CUDA=1 for the CUDA emulator's gpu_dump_logits_emu.
"""
import contextlib
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import hf_checkpoint  # noqa: E402

__version__ = "2.11.0+standin"


class dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


float32 = dtype("float32")
bfloat16 = dtype("bfloat16")
int64 = dtype("int64")

_rng = random.Random(0)


def manual_seed(seed):
    _rng.seed(seed)


_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision):
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"invalid precision {precision!r}")
    _matmul_precision[0] = precision


def get_float32_matmul_precision():
    return _matmul_precision[0]


@contextlib.contextmanager
def no_grad():
    yield


def _round(values, dt):
    if dt is bfloat16:
        return [hf_checkpoint.bf16_value(hf_checkpoint.bf16_bits(v)) for v in values]
    return list(values)


class Tensor:
    def __init__(self, data, shape, dt=float32, device="cpu"):
        self.data, self.shape, self.dtype, self.device = data, tuple(shape), dt, device

    def normal_(self, mean=0.0, std=1.0):
        self.data = _round([_rng.gauss(mean, std) for _ in self.data], self.dtype)
        return self

    def to(self, *args, **kwargs):
        dt, device = self.dtype, self.device
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, dtype):
                dt = a
            elif isinstance(a, str):
                device = a
        if device not in ("cpu",):
            raise RuntimeError(f"stand-in torch has no device {device!r}")
        return Tensor(_round(self.data, dt) if dt is not self.dtype else list(self.data),
                      self.shape, dt, device)

    def float(self):
        return self.to(float32)

    def cpu(self):
        return self.to("cpu")

    def detach(self):
        return self

    def clone(self):
        return Tensor(list(self.data), self.shape, self.dtype, self.device)

    def tolist(self):
        def build(offset, dims):
            if not dims:
                return self.data[offset]
            stride = 1
            for d in dims[1:]:
                stride *= d
            return [build(offset + i * stride, dims[1:]) for i in range(dims[0])]
        return build(0, list(self.shape))

    def __getitem__(self, index):
        # Only what hf_compare uses: a 3-D tensor indexed [int, slice] -> 2-D.
        i, rows = index
        _, t, v = self.shape
        start, stop, step = rows.indices(t)
        picked = list(range(start, stop, step))
        data = []
        for r in picked:
            base = (i * t + r) * v
            data += self.data[base:base + v]
        return Tensor(data, (len(picked), v), self.dtype, self.device)


def tensor(nested, device="cpu", dtype=None):
    """A 1-D or 2-D tensor from (nested) lists."""
    if nested and isinstance(nested[0], list):
        shape, flat = (len(nested), len(nested[0])), [x for row in nested for x in row]
    else:
        shape, flat = (len(nested),), list(nested)
    return Tensor(flat, shape, dtype or int64, "cpu").to(device)


def equal(a, b):
    return a.shape == b.shape and a.data == b.data


class _Cuda:
    """No CUDA here, except with STANDIN_CUDA=1 (the engine's CUDA side is then the CUDA
    emulator's gpu_dump_logits_emu; transformers' side still runs on "cpu")."""

    @staticmethod
    def is_available():
        return os.environ.get("STANDIN_CUDA") == "1"

    @staticmethod
    def get_device_name():
        return "stand-in (CUDA emulator)"


cuda = _Cuda()


class _Version:
    cuda = None


version = _Version()
