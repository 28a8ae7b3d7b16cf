"""What a kernel package provides: its sources and spaces, and the declaration of its problem
(dimensions and how shapes are written), its operands and the check of its answer. The data
writer (harness/build.py), the manifest (docs/contracts.md), the agent's CPU main and GPU worker
and the reports read that declaration; none of them knows a kernel's operands by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

from remote_agent.contract import DTYPE_BYTES, ELEM_ATOL, ELEM_RTOL, REL_ERR_TOL

from ..shapes import MATMUL, Problem

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"
ROLES = ("input", "output", "reference")


@dataclass(frozen=True)
class Operand:
    """One buffer of a problem: an input the kernel reads, an output it writes, or the reference an
    output is checked against.

    ``name`` is the kernel's pointer argument (C++ kernels: ``name``; Triton: ``name_ptr``) and
    the data file's role in the manifest. ``dims`` is its logical shape: a tuple of problem
    dimension names or numbers (``("M", "K")``), or a function of the shape giving numbers.
    ``dtype``: ``"problem"`` (the shape's dtype), a dtype name, or a function of the shape's dtype.
    ``transposed``: a function of the shape, true when the operand is stored with its last two
    dimensions swapped (matmul's layout ``TN`` stores A as K x M); else it is row-major.
    ``copy_of``: an input that holds the named input's values in its own layout (the same
    logical shape and dtype): a GPU worker fills the named input and copies it here; make_data
    gives both."""

    name: str
    role: str
    dims: Union[tuple, Callable]
    dtype: Union[str, Callable] = "problem"
    transposed: Optional[Callable] = None
    copy_of: Optional[str] = None

    def dims_of(self, shape) -> tuple:
        if callable(self.dims):
            return tuple(int(d) for d in self.dims(shape))
        return tuple(d if isinstance(d, int) else getattr(shape, d) for d in self.dims)

    def dtype_of(self, problem_dtype: str) -> str:
        if callable(self.dtype):
            return self.dtype(problem_dtype)
        return problem_dtype if self.dtype == "problem" else self.dtype

    def is_transposed(self, shape) -> bool:
        return bool(self.transposed and self.transposed(shape))

    def stored_dims(self, shape) -> tuple:
        """The shape of the operand as it lies in memory, row-major."""
        dims = self.dims_of(shape)
        return dims[:-2] + (dims[-1], dims[-2]) if self.is_transposed(shape) and len(dims) >= 2 else dims

    def strides_of(self, shape) -> tuple:
        """Element strides of the logical dimensions in memory."""
        dims = self.dims_of(shape)
        stored = self.stored_dims(shape)
        row_major, step = [], 1
        for d in reversed(stored):
            row_major.insert(0, step)
            step *= d
        if self.is_transposed(shape) and len(dims) >= 2:
            row_major[-1], row_major[-2] = row_major[-2], row_major[-1]
        return tuple(row_major)

    def elements(self, shape) -> int:
        n = 1
        for d in self.dims_of(shape):
            n *= d
        return n

    def describe(self, shape) -> dict:
        """The manifest's record of this operand for one shape (docs/contracts.md)."""
        dtype = self.dtype_of(shape.dtype)
        out = {"name": self.name, "role": self.role, "dtype": dtype, "shape": list(self.dims_of(shape)),
               "strides": list(self.strides_of(shape)), "elements": self.elements(shape),
               "bytes": self.elements(shape) * DTYPE_BYTES[dtype]}
        if self.copy_of:
            out["copy_of"] = self.copy_of
        return out


@dataclass(frozen=True)
class Check:
    """How an output is checked: ``rel_err`` = ||out - ref|| / ||ref|| against the kernel's
    tolerance for the problem dtype, and ``err_ratio`` = share of elements outside
    atol + rtol * |ref| (NaN counts as outside)."""

    output: str
    reference: str
    kind: str = "rel_err"


def default_tolerances() -> dict:
    return {"rel_err": dict(REL_ERR_TOL), "rtol": dict(ELEM_RTOL), "atol": dict(ELEM_ATOL)}


@dataclass
class Kernel:
    name: str
    description: str
    cpu_space: dict  # parameter -> values for CPU builds
    cpu_rules: list  # harness.space.Rule
    cpu_template: Path  # Jinja template of the kernel's C++ source
    make_data: Callable  # (shape, seed) -> {operand name: ndarray} for every input and reference
    strides: Callable  # shape -> dict of named stride scalars the kernel takes ({} if none)
    flops: Callable  # shape -> floating point operations
    bytes_moved: Callable  # shape -> fewest bytes through memory
    grid: Callable  # (config, shape, target) -> (grid_x, grid_y, grid_z)
    operands: tuple = ()  # Operand, in the order the kernel takes its pointers
    problem: Problem = MATMUL  # dimension names, dtypes, layouts: how shapes are written
    checks: tuple = ()  # Check; empty: every output against the reference of the same position
    tolerances: dict = field(default_factory=default_tolerances)  # rel_err / rtol / atol per dtype
    default_shapes: dict = field(default_factory=dict)  # "cpu" / "gpu" -> shape list when none is given
    entry: str = ""  # the C++ template's function name; default <name>_kernel
    device_reference: str = ""  # how the GPU worker computes the reference on the device ("matmul": torch or
    # the bundle's reference kernel, C = A @ B); GPU bundles need one, CPU bundles ship the reference
    # the kernel's side of the GPU agent (its folder's device.py: torch reference, the check of its
    # reference kernel, library launchers), shipped in GPU bundles; None: GPU bundles cannot be checked
    device_plugin: Optional[Path] = None
    gpu_space: dict = field(default_factory=dict)
    gpu_space_cuda: dict = field(default_factory=dict)  # extra parameters on NVIDIA
    gpu_space_hip: dict = field(default_factory=dict)  # extra parameters on AMD
    gpu_rules: list = field(default_factory=list)
    triton_module: Optional[str] = None  # "package.module:function" of the Triton kernel
    # config -> "package.module:function" of another kernel that runs it (the matmul's warp-specialized
    # Gluon kernel), or None where triton_module does; None: triton_module runs every config
    other_source: Optional[Callable] = None
    # (config, a_t, b_t) -> [Descriptor]: the Triton kernel's tensor descriptor arguments that the
    # agent makes on the host (harness/kernels/matmul/descriptors.py); None: it takes none
    tensor_descriptors: Optional[Callable] = None
    # (shape, target) -> [config]: configs known to be good for the shape's class, measured in the
    # first round of every search (harness.strategies.seeded); None: no rules of thumb
    seed_configs: Optional[Callable] = None
    gpu_library: str = "torch.matmul"  # what the GPU agent times as the library to beat (--library)
    # the library to beat on CPUs: "openblas" (cblas_sgemm computes this kernel's C = A @ B: fp32
    # shapes are timed against it), else the reference build (lib:reference)
    cpu_library: Optional[str] = None
    reference_config: Optional[dict] = None  # the library build's config on CPUs (default: first values)

    def __post_init__(self):
        self.entry = self.entry or "%s_kernel" % self.name
        for op in self.operands:
            if op.role not in ROLES:
                raise ValueError("kernel %s: operand %s has role %r (one of %s)" % (self.name, op.name, op.role,
                                                                                  ", ".join(ROLES)))
        if not self.checks:
            outputs = [op.name for op in self.operands if op.role == "output"]
            refs = [op.name for op in self.operands if op.role == "reference"]
            self.checks = tuple(Check(o, r) for o, r in zip(outputs, refs))
        names = {op.name for op in self.operands}
        for check in self.checks:
            if check.output not in names or check.reference not in names:
                raise ValueError("kernel %s: check %s against %s names no operand" % (
                    self.name, check.output, check.reference))

    def space_for(self, target) -> dict:
        if target.is_gpu:
            space = dict(self.gpu_space)
            space.update(self.gpu_space_hip if target.backend == "hip" else self.gpu_space_cuda)
            return space
        return dict(self.cpu_space)

    def triton_source(self, config: dict) -> str:
        """The "package.module:function" that ``config`` compiles to on a GPU."""
        return (self.other_source and self.other_source(config)) or self.triton_module

    def rules_for(self, target) -> list:
        return self.gpu_rules if target.is_gpu else self.cpu_rules

    # ---- the declaration, resolved for one shape --------------------------------------------
    def scalars(self, shape) -> dict:
        """The integer arguments the kernel takes after its pointers: the problem's dimensions,
        then its named strides."""
        values = dict(shape.dims)
        values.update(self.strides(shape))
        return values

    def pointer_operands(self) -> list:
        """Operands the kernel takes a pointer to (references are the checker's only)."""
        return [op for op in self.operands if op.role != "reference"]

    def cpu_params(self, shape) -> list:
        """The C++ kernel's arguments: ``(ctype, name)`` of every pointer, then every scalar."""
        params = [("const void*" if op.role == "input" else "void*", op.name) for op in self.pointer_operands()]
        return params + [("int32_t", name) for name in self.scalars(shape)]

    def describe_checks(self) -> list:
        return [{"output": c.output, "reference": c.reference, "kind": c.kind} for c in self.checks]
