"""Import public *measured* GPU kernel latencies into ``pimjax/hw/measured/``.

Sources (read from bare git mirrors, nothing is downloaded here):

* ``PrincetonUniversity/LLMCompass`` -> ``llmcompass.csv``
  (A100 / MI210 fp16 GEMM, softmax, layernorm, GELU sweeps; 4xA100 all-reduce
  sweep; GPT-3 175B layer at TP=4, prefill and decode, per op).
* ``trsharm25/NeuSight`` -> ``neusight_ops_<gpu>.csv`` (single-op sweeps, fp32)
  and ``neusight_models.csv`` (op-by-op traces of BERT/GPT-2/GPT-3/OPT/Switch
  plus whole-model end-to-end times).

How to re-run
-------------
1. Obtain bare mirrors so that these git dirs exist::

       <mirror-root>/PrincetonUniversity+LLMCompass/repo
       <mirror-root>/trsharm25+NeuSight/repo

   (in the agent sandbox: ``fetch github:PrincetonUniversity/LLMCompass`` and
   ``fetch github:trsharm25/NeuSight``; any ``git clone --bare`` works too).
2. From the repository root::

       python3 benchmarks/measured_import.py --mirror-root /work/.mirror

   Options: ``--out DIR`` (default ``pimjax/hw/measured``),
   ``--llmcompass-commit SHA`` / ``--neusight-commit SHA`` (default: mirror
   HEAD; the commits used for the checked-in CSVs are recorded in each file's
   ``# commit:`` line and in the README).

The script only *reads* the mirrors (``git show``/``git ls-tree``), uses the
standard library only, and writes the CSVs deterministically (row order follows
the source files; numbers are formatted with fixed rules).  It prints a
per-(file, gpu, op, dtype) row-count summary and the consistency checks it ran.
``README.md`` in the output folder is maintained by hand.

Output columns: ``gpu,op,dtype,batch,m,n,k,rows,cols,numel,conv,time_us,context``
(see README.md for the conversion rules).
"""

from __future__ import annotations

import argparse
import ast
import collections
import csv
import io
import json
import os
import re
import subprocess
import sys

csv.field_size_limit(1 << 30)

COLS = ["gpu", "op", "dtype", "batch", "m", "n", "k", "rows", "cols",
        "numel", "conv", "time_us", "context"]
MAX_BYTES = 3_000_000  # split threshold per output file

LLMC_REPO = "PrincetonUniversity/LLMCompass"
NS_REPO = "trsharm25/NeuSight"

# --------------------------------------------------------------------------
# git helpers (read-only)
# --------------------------------------------------------------------------


class Mirror:
    def __init__(self, gitdir: str, commit: str | None):
        self.gitdir = gitdir
        self.commit = commit or self._run("rev-parse", "HEAD").strip()
        self.missing: list[str] = []

    def _run(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", self.gitdir, *args],
                              check=True, capture_output=True,
                              text=True).stdout

    def ls(self, prefix: str) -> list[str]:
        out = self._run("ls-tree", "-r", "--name-only", self.commit, "--",
                        prefix)
        return sorted(p for p in out.splitlines() if p)

    def show(self, path: str) -> str | None:
        """File text, or None when the blob is absent from the mirror."""
        r = subprocess.run(["git", "--git-dir", self.gitdir, "show",
                            f"{self.commit}:{path}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.missing.append(path)
            return None
        return r.stdout

    def csv_rows(self, path: str) -> list[dict] | None:
        txt = self.show(path)
        if txt is None:
            return None
        return list(csv.DictReader(io.StringIO(txt)))


# --------------------------------------------------------------------------
# formatting
# --------------------------------------------------------------------------


def fnum(x: float) -> str:
    """time in us: 3 decimals (1 ns), trailing zeros stripped."""
    s = f"{x:.3f}".rstrip("0").rstrip(".")
    return s if s not in ("", "-0") else "0"


def row(**kw) -> dict:
    r = {c: "" for c in COLS}
    for k, v in kw.items():
        assert k in r, k
        r[k] = "" if v is None else str(v)
    return r


def prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def write_csv(path: str, header: list[str], rows: list[dict]) -> None:
    buf = io.StringIO()
    for h in header:
        buf.write("# " + h + "\n")
    w = csv.DictWriter(buf, fieldnames=COLS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    with open(path, "w", newline="") as f:
        f.write(buf.getvalue())


# --------------------------------------------------------------------------
# LLMCompass
# --------------------------------------------------------------------------

LLMC_GPU = {"A100": "a100", "MI210": "mi210"}


def _py_assign(src: str, name: str):
    """Literal value of the first top-level-or-nested ``name = <literal>``."""
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id == name:
                    return ast.literal_eval(node.value)
    raise KeyError(name)


def csv_fields(m: Mirror, path: str) -> list[list[str]]:
    """The comma-separated fields, stripped, of every non-blank line of a headerless file."""
    return [[x.strip() for x in line.split(",")] for line in m.show(path).splitlines() if line.strip()]


def llmcompass(m: Mirror) -> tuple[list[dict], list[str]]:
    out: list[dict] = []
    base = "ae/figure5"
    paths = []

    # --- GEMM: "M, N, K, <lat>ms, <tput>Tflops"; C[M,N] = A[M,K] @ B[K,N]
    for dev in ("A100", "MI210"):
        p = f"{base}/ab/real_hardware/matmul_{dev}.csv"
        paths.append(p)
        for f in csv_fields(m, p):
            M, N, K = int(f[0]), int(f[1]), int(f[2])
            ms = float(f[3].removesuffix("ms"))
            tf = float(f[4].removesuffix("Tflops"))
            # self-check: the file's TFLOPS column is 2MNK/latency
            assert abs(2 * M * N * K / (ms * 1e-3) / 1e12 - tf) / tf < 2e-3
            sweep = ("fig5b sweep M (N=K=12288)" if N == K == 12288 else
                     "fig5a sweep N=K (M=8192)")
            out.append(row(gpu=LLMC_GPU[dev], op="gemm", dtype="fp16",
                           m=M, n=N, k=K, time_us=fnum(ms * 1e3),
                           context=sweep))

    # --- softmax / layernorm: "M, N, G_elements_per_s" (M rows of length N)
    for sub, op in (("cf", "softmax"), ("de", "layernorm")):
        for dev in ("A100", "MI210"):
            p = f"{base}/{sub}/real_hardware/{op}_{dev}.csv"
            paths.append(p)
            for i, f in enumerate(csv_fields(m, p)):
                M, N, g = int(f[0]), int(f[1]), float(f[2])
                t_us = M * N / (g * 1e9) * 1e6
                sweep = ("fig5 sweep N (M=4096)" if i < 11 else
                         "fig5 sweep M (N=4096)")
                out.append(row(gpu=LLMC_GPU[dev], op=op, dtype="fp16",
                               rows=M, cols=N, time_us=fnum(t_us),
                               context=sweep))

    # --- GELU: "numel, G_elements_per_s"
    for dev in ("A100", "MI210"):
        p = f"{base}/g/real_hardware/gelu_{dev}.csv"
        paths.append(p)
        for f in csv_fields(m, p):
            n, g = int(f[0]), float(f[1])
            out.append(row(gpu=LLMC_GPU[dev], op="gelu", dtype="fp16",
                           numel=n, time_us=fnum(n / (g * 1e9) * 1e6),
                           context="fig5g sweep numel (tanh approx, torch.compile)"))

    # --- all-reduce on 4xA100 (NVLink3): lists hard-coded in the test script
    p = f"{base}/h/test_allreduce.py"
    paths.append(p)
    src = m.show(p)
    lat_us = _py_assign(src, "gpu_latency_list")
    size_b = _py_assign(src, "size_list")
    assert len(lat_us) == len(size_b) == 32
    for b, t in zip(size_b, lat_us):
        out.append(row(gpu="a100", op="allreduce", dtype="fp16",
                       numel=b // 2, time_us=fnum(float(t)),
                       context=f"fig5h 4xA100 NVLink allreduce bytes={b}"))

    # --- GPT-3 175B layer, TP=4, per-op (seconds, one value per line)
    p_plot = f"{base}/ijkl/plot_transformer.py"
    paths.append(p_plot + " (column order)")
    cats = _py_assign(m.show(p_plot), "categories")
    assert len(cats) == 12 and cats[0] == "Q_K_V" and cats[-1] == "AllReduce_FFN"
    b, s, d, h, tp = 8, 2048, 12288, 96, 4          # test_transformer.py
    dh, hl = d // h, h // tp                        # 128, 24 heads per GPU
    kv = s + 1024 + 1                               # decode: seq_len=s+1024, +1 new token
    for phase, fname in (("prefill", "transformer_A100.csv"),
                         ("decode", "transformerAR_A100.csv")):
        p = f"{base}/ijkl/real_hardware/{fname}"
        paths.append(p)
        vals = [float(l.split(",")[0]) for l in m.show(p).splitlines()
                if l.strip()]
        assert len(vals) == 12, (p, len(vals))
        v = dict(zip(cats, vals))
        T = b * s if phase == "prefill" else b      # tokens
        ctx = f"gpt3-175b tp4 {phase} b={b} s={s}" + (
            f" kv={kv}" if phase == "decode" else "")
        def add(op, t_s, name, **kw):
            out.append(row(gpu="a100", op=op, dtype="fp16",
                           time_us=fnum(t_s * 1e6), context=f"{ctx} {name}",
                           **kw))
        add("gemm", v["Q_K_V"] / 3, "q_proj (=k_proj=v_proj; file value Q_K_V is 3x one measured projection)",
            m=T, n=d // tp, k=d)
        if phase == "prefill":
            add("bmm", v["Q_mul_K"], "q_mul_k", batch=b * hl, m=s, n=s, k=dh)
            add("bmm", v["A_mul_V"], "a_mul_v", batch=b * hl, m=s, n=dh, k=s)
            add("softmax", v["Softmax"], "softmax", rows=b * hl * s, cols=s)
        else:
            add("bmm", v["Q_mul_K"], "q_mul_k", batch=b * hl, m=1, n=kv, k=dh)
            add("bmm", v["A_mul_V"], "a_mul_v", batch=b * hl, m=1, n=dh, k=kv)
            add("softmax", v["Softmax"], "softmax", rows=b * hl, cols=kv)
        add("gemm", v["Wo_proj"], "wo_proj", m=T, n=d, k=d // tp)
        add("gemm", v["W1_proj"], "w1_proj", m=T, n=4 * d // tp, k=d)
        add("gemm", v["W2_proj"], "w2_proj", m=T, n=d, k=4 * d // tp)
        add("layernorm", v["LayerNorm_MHA"],
            "layernorm_mha (launch overhead subtracted by LLMCompass; MHA and FFN entries are the same single measurement)",
            rows=T, cols=d)
        add("layernorm", v["LayerNorm_FFN"], "layernorm_ffn (same measurement as layernorm_mha)",
            rows=T, cols=d)
        add("gelu", v["GeLU"], "gelu", numel=T * 4 * d // tp)
        add("allreduce", v["AllReduce_MHA"],
            "allreduce_mha (hand-entered in the csv; not produced by run_on_gpu)",
            numel=T * d)
        add("allreduce", v["AllReduce_FFN"],
            "allreduce_ffn (hand-entered in the csv; not produced by run_on_gpu)",
            numel=T * d)
    return out, paths


# --------------------------------------------------------------------------
# NeuSight
# --------------------------------------------------------------------------

NS_GPU = {
    "NVIDIA A100-PCIE-40GB": "a100-40gb",
    "NVIDIA A100-SXM4-40GB": "a100-40gb",
    "NVIDIA A100 80GB PCIe": "a100-80gb",
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA L4": "l4",
    "Tesla V100-PCIE-32GB": "v100",
    "Tesla T4": "t4",
    "Tesla P100-PCIE-16GB": "p100",
    "Tesla P4": "p4",
    "AMD Instinct MI100": "mi100",
    "AMD Instinct MI210": "mi210",
    "AMD Instinct MI250": "mi250",
}
NS_GPU_DIR = {k.replace(" ", "_"): v for k, v in NS_GPU.items()}

NS_ELEM = ["add", "mul", "pow", "div", "addu", "mulu", "powu", "divu",
           "relu", "gelu", "tanh"]
NS_OPS = ["bmm", "linear", "conv", "softmax", "ln"] + NS_ELEM
# kernel-name fragments that would indicate reduced precision
_LOWP = re.compile(r"tf32|half|bf16|bfloat|__nv_bfloat|f16|hgemm|s1688|"
                   r"s16816|_hh|_hs", re.I)


def ns_op_row(d: dict, gpu: str) -> dict:
    op = d["OPName"]
    t_us = fnum(float(d["Latency"]) * 1e3)          # CUDA events -> ms
    nk = d.get("Kernels", "").count(";")
    ctx = f"kernels={nk}" if nk > 1 else ""
    if op == "bmm":     # x[B,M,N] @ y[B,N,K] -> [B,M,K]
        return row(gpu=gpu, op="bmm", dtype="fp32", batch=d["B"], m=d["M"],
                   n=d["K"], k=d["N"], time_us=t_us, context=ctx)
    if op == "linear":  # nn.Linear(N,K,bias=True)(x[B,M,N]) -> [B,M,K]
        return row(gpu=gpu, op="gemm", dtype="fp32",
                   m=int(d["B"]) * int(d["M"]), n=d["K"], k=d["N"],
                   time_us=t_us, context=ctx)
    if op == "conv":    # Conv2d(Cin,Cout,k,stride,pad,bias=False)(x[B,Cin,S,S])
        c = (f"n={d['B']};h={d['Input_Size']};w={d['Input_Size']};"
             f"c={d['Input_Channel']};f={d['Output_Channel']};"
             f"kh={d['Kernel_Szie']};kw={d['Kernel_Szie']};"
             f"stride={d['Stride']};pad={d['Padding']};groups=1")
        return row(gpu=gpu, op="conv", dtype="fp32", conv=c, time_us=t_us,
                   context=ctx)
    if op in ("softmax", "ln"):  # x[B,H], reduce over H
        return row(gpu=gpu, op="softmax" if op == "softmax" else "layernorm",
                   dtype="fp32", rows=d["B"], cols=d["H"], time_us=t_us,
                   context=ctx)
    if op in NS_ELEM:
        return row(gpu=gpu, op=op, dtype="fp32",
                   numel=int(d["B"]) * int(d["H"]), time_us=t_us, context=ctx)
    raise ValueError(op)


def neusight_ops(m: Mirror, checks: list[str]):
    """-> {gpu: [rows]}, [paths]"""
    per_gpu: dict[str, list[dict]] = collections.defaultdict(list)
    paths: dict[str, list[str]] = collections.defaultdict(list)
    lowp = 0

    def take(rows, path, src_gpu=None):
        nonlocal lowp
        for d in rows:
            gpu = NS_GPU[d["Device"].strip()]
            if src_gpu:
                assert gpu == src_gpu, (path, d["Device"])
            if _LOWP.search(d.get("Kernel Name", "")):
                lowp += 1
            per_gpu[gpu].append(ns_op_row(d, gpu))
            if path not in paths[gpu]:
                paths[gpu].append(path)

    # 1. training sweeps, one file per (op, device)
    for root in ("scripts/asplos/data/dataset/train/collect",
                 "scripts/asplos/data/dataset_amd/train/collect"):
        files = m.ls(root)
        for op in NS_OPS:
            for p in files:
                mm = re.fullmatch(re.escape(root) + rf"/{op}/p[0-9.]+/(.+)\.csv", p)
                if not mm:
                    continue
                rows = m.csv_rows(p)
                if rows is None:
                    continue
                take(rows, p, NS_GPU[mm.group(1)])

    # 2. NVIDIA test sets (merged files with a Device column).  vec.csv and
    #    habitat.csv are the concatenation ln+softmax+elem -> skipped (checked).
    troot = "scripts/asplos/data/dataset/test"
    def key(d):
        return d["Device"], d["OPName"], d["B"], d["H"], d["Latency"]
    parts = []
    for name in ("bmm", "linear", "ln", "softmax", "elem"):
        p = f"{troot}/{name}.csv"
        rows = m.csv_rows(p)
        if rows is None:
            continue
        if name in ("ln", "softmax", "elem"):
            parts += [key(d) for d in rows]
        take(rows, p)
    for dup in ("vec", "habitat"):
        rows = m.csv_rows(f"{troot}/{dup}.csv")
        if rows is not None:
            same = collections.Counter(key(d) for d in rows) == collections.Counter(parts)
            checks.append(f"NeuSight test/{dup}.csv == ln+softmax+elem: {same}")

    # 3. AMD test sets (per device)
    aroot = "scripts/asplos/data/dataset_amd/test/collect"
    for p in m.ls(aroot):
        mm = re.fullmatch(re.escape(aroot) + r"/(bmm|linear)/p[0-9.]+/(.+)\.csv", p)
        if mm:
            rows = m.csv_rows(p)
            if rows is not None:
                take(rows, p, NS_GPU[mm.group(2)])

    # 4. H100 fp16 bmm spot check (fp16mm_exp.py; device = H100 by its config)
    p = "scripts/asplos/fp16mm.csv"
    rows = m.csv_rows(p)
    if rows is not None:
        for d in rows:
            per_gpu["h100"].append(row(
                gpu="h100", op="bmm", dtype="fp16", batch=d["B"], m=d["M"],
                n=d["K"], k=d["N"], time_us=fnum(float(d["Latency"]) * 1e3),
                context="fp16mm_exp.py (torch.bmm fp16; GPU inferred from the H100 config it is compared against)"))
        paths["h100"].append(p)

    checks.append(f"NeuSight per-op rows whose kernel name looks reduced-precision "
                  f"(tf32/half/bf16): {lowp}")

    # merged training files must be subsets of the per-device files
    for p in ("scripts/asplos/data/dataset/train/ln.csv",
              "scripts/asplos/data/dataset/train/softmax.csv",
              "scripts/asplos/data/dataset/train/elem.csv",
              "scripts/asplos/data/dataset_amd/train/vec.csv"):
        rows = m.csv_rows(p)
        if rows is None:
            continue
        have = collections.Counter(
            (r["gpu"], r["op"], r["rows"], r["cols"], r["numel"], r["time_us"])
            for g in per_gpu.values() for r in g)
        miss = 0
        for d in rows:
            r = ns_op_row(d, NS_GPU[d["Device"].strip()])
            k = (r["gpu"], r["op"], r["rows"], r["cols"], r["numel"], r["time_us"])
            if have[k] == 0:
                miss += 1
        checks.append(f"{p}: {len(rows)} rows, not found among imported rows: {miss}")
    return per_gpu, paths


# ---- model traces --------------------------------------------------------

_MOD_OP = {
    "torch.nn.modules.linear.Linear": "gemm",
    "torch.nn.modules.normalization.LayerNorm": "layernorm",
    "torch.nn.modules.sparse.Embedding": "embedding",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.Softmax": "softmax",
    "torch.nn.modules.dropout.Dropout": "dropout",
}
_FN_OP = {  # normalised FX target -> op
    "addmm": "gemm", "matmul": "mm", "bmm": "mm",
    "softmax": "softmax", "gelu": "gelu", "tanh": "tanh", "relu": "relu",
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "pow": "pow",
    "where": "where", "masked_fill": "masked_fill",
    "masked_fill_": "masked_fill", "max": "maximum", "rsqrt": "rsqrt",
    "mean": "mean", "contiguous": "copy", "clone": "copy",
    "dropout": "dropout", "embedding": "embedding",
}
_BINARY = {"add", "sub", "mul", "div", "pow"}


def _fx_name(target: str) -> str:
    t = re.sub(r" at 0x[0-9a-f]+", "", target)
    mm = re.match(r"<built-in (?:function|method) (\w+)", t) or \
        re.match(r"<function (\w+)", t)
    return mm.group(1) if mm else t


def _shape(s: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", s)]


def ns_trace_rows(rows: list[dict], gpu: str, desc: str, train: bool):
    out = []
    for d in rows:
        if d["op"] not in ("call_module", "call_function", "call_method"):
            continue
        if d["dtype"] not in ("torch.float32", "torch.float16", "torch.bfloat16"):
            continue
        dtype = {"torch.float32": "fp32", "torch.float16": "fp16",
                 "torch.bfloat16": "bf16"}[d["dtype"]]
        stack = re.findall(r"\('([^']*)', <class '([^']+)'>\)", d["meta"])
        if d["op"] == "call_module":
            op = _MOD_OP.get(stack[-1][1]) if stack else None
            where = d["target"]
        else:
            op = _FN_OP.get(_fx_name(d["target"]))
            where = (stack[-1][0] + ":" if stack else "") + d["Name"]
        if op is None:
            continue
        if op == "dropout" and not train:
            continue  # identity in eval mode: no kernel, time = event floor
        ins = [_shape(s) for s in re.findall(r"\[[-\d, ]*\]", d["input_shapes"])]
        outs = _shape(d["output_shape"])
        n_out = prod(outs)
        if op == "maximum" and len(ins) < 2:
            continue  # torch.max reduction, not the elementwise form
        kw = {}
        if op == "gemm":
            if _fx_name(d["target"]) == "addmm":
                a, w = ins[1], ins[2]
                kw = dict(m=a[0], k=a[1], n=w[1])
            else:
                a = ins[0]
                kw = dict(m=prod(a[:-1]), k=a[-1], n=outs[-1])
        elif op == "mm":
            a, b = ins[0], ins[1]
            if len(a) >= 3 and len(b) >= 3:
                op = "bmm"
                kw = dict(batch=prod(outs[:-2]), m=a[-2], k=a[-1], n=b[-1])
            elif len(b) == 2:
                op = "gemm"
                kw = dict(m=prod(a[:-1]), k=a[-1], n=b[-1])
            else:
                continue
        elif op in ("softmax", "layernorm"):
            kw = dict(rows=n_out // outs[-1], cols=outs[-1])
        elif op == "mean":
            a = ins[0]
            kw = dict(rows=prod(a[:-1]), cols=a[-1])
        else:
            kw = dict(numel=n_out)
            if op in _BINARY:
                big = [s for s in ins if prod(s) > 1]
                if len(big) < 2:
                    op += "u"   # tensor-scalar form (NeuSight's addu/mulu/...)
        phase = "train-fwd" if train else "inf"
        out.append(row(gpu=gpu, op=op, dtype=dtype,
                       time_us=fnum(float(d["fw_latency"]) * 1e3),
                       context=f"{desc} {phase} {where}", **kw))
    return out


def neusight_models(m: Mirror, checks: list[str]):
    lroot = "scripts/asplos/label"
    files = m.ls(lroot)
    out, used = [], []
    for p in files:
        mm = re.fullmatch(re.escape(lroot) + r"/([^/]+)/(.+)\.(csv|json)", p)
        if not mm:
            continue
        gdir, desc, ext = mm.groups()
        gpu = NS_GPU_DIR[gdir]
        parts = desc.split("-")
        model, mode, seq, bs = parts[0], parts[1], parts[2], parts[3]
        extra = parts[4:]
        nice = f"{model} s={seq} b={bs}"
        if ext == "csv":
            rows = m.csv_rows(p)
            if rows is None:
                continue
            out += ns_trace_rows(rows, gpu, nice, train=(mode == "train"))
            used.append(p)
        else:
            if extra and extra[0] != "fusion":
                continue  # dp4/tp4/pp4 Megatron runs: multi-GPU, dtype unknown
            txt = m.show(p)
            if txt is None:
                continue
            e = json.loads(txt)
            fus = " torch.compile" if extra else " eager"
            nl = f" num_layer={e['num_layer']}" if e.get("num_layer") else ""
            ctx = (f"{nice} {mode}{fus} whole model e2e (fw={e['fw_latency']:.3f}ms "
                   f"bw={e['bwall_latency']:.3f}ms{nl})")
            out.append(row(gpu=gpu, op="model_e2e", dtype="fp32",
                           time_us=fnum(float(e["e2e_latency"]) * 1e3),
                           context=ctx))
            used.append(p)
    return out, used


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

UNITS_KERNEL = ("time_us is microseconds per single call of the op "
                "(one PyTorch op call; usually one kernel, context "
                "kernels=N when the profiled call launched N>1 kernels, e.g. "
                "conv transforms or split-K)")
UNITS_TRACE = ("time_us is microseconds per single call of one FX node "
               "(one PyTorch op call, normally one kernel)")


def summarize(fname: str, rows: list[dict], acc: collections.Counter):
    for r in rows:
        acc[(fname, r["gpu"], r["op"], r["dtype"])] += 1


def split_write(outdir: str, stem: str, header: list[str], rows: list[dict],
                written: list[tuple[str, list[dict]]]):
    """Write stem.csv; if it would exceed MAX_BYTES split by op family."""
    def size(rs):
        b = io.StringIO()
        csv.DictWriter(b, fieldnames=COLS, lineterminator="\n").writerows(rs)
        return len(b.getvalue()) + 2000
    if size(rows) <= MAX_BYTES:
        write_csv(os.path.join(outdir, stem + ".csv"), header, rows)
        written.append((stem + ".csv", rows))
        return
    fam = collections.OrderedDict()
    for r in rows:
        f = ("mm" if r["op"] in ("gemm", "bmm") else
             "conv" if r["op"] == "conv" else "vec")
        fam.setdefault(f, []).append(r)
    for f, rs in fam.items():
        assert size(rs) <= MAX_BYTES, (stem, f, size(rs))
        write_csv(os.path.join(outdir, f"{stem}_{f}.csv"), header, rs)
        written.append((f"{stem}_{f}.csv", rs))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirror-root", default="/work/.mirror")
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "pimjax", "hw",
        "measured"))
    ap.add_argument("--llmcompass-commit")
    ap.add_argument("--neusight-commit")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    llmc = Mirror(os.path.join(a.mirror_root, "PrincetonUniversity+LLMCompass",
                               "repo"), a.llmcompass_commit)
    ns = Mirror(os.path.join(a.mirror_root, "trsharm25+NeuSight", "repo"),
                a.neusight_commit)
    checks: list[str] = []
    written: list[tuple[str, list[dict]]] = []

    # ---- LLMCompass
    rows, paths = llmcompass(llmc)
    hdr = [
        f"source: {LLMC_REPO}",
        "path: " + "; ".join(paths),
        f"commit: {llmc.commit}",
        "units: time_us is microseconds per op call. gemm: file latency (ms, 4 decimals) x1000. "
        "softmax/layernorm/gelu: files store throughput in G elements/s (= M*N/latency/1e9, or numel/latency/1e9), "
        "converted as time_us = elements/(G*1e3). allreduce sweep: test_allreduce.py lists us (size in bytes). "
        "gpt3 layer files: seconds per op, x1e6.",
        "notes: measured by LLMCompass run_on_gpu(): host wall clock time.time() around one PyTorch call + "
        "torch.cuda.synchronize(), median of 50 after 3 warm-ups, so every value includes launch/Python overhead "
        "(A100 floor ~13 us for softmax, ~47-53 us for torch.compile'd gelu/layernorm). A100 values are exact multiples "
        "of 2^-23 s (time.time() quantisation) confirming the wall-clock origin; MI210 values are not (timer unknown). "
        "dtype fp16 as declared by the experiments (Matmul(data_type=fp16)); BUT Matmul.run_on_gpu at this commit "
        "allocates torch.bfloat16 (BatchedMatmul/softmax/layernorm/gelu use float16) and the repo history is one "
        "'init' commit, so gemm rows may be bf16 (same dense peak on A100/MI210). gelu = tanh approximation via "
        "torch.compile; layernorm = torch.layer_norm without affine, torch.compile. gpu a100 is very likely "
        "A100-SXM4-80GB (configs say A100_80GB / 'NVIDIA A100(80GB)x4' NVLink; decode w1 streams 302 MB in 186 us = "
        "1.62 TB/s > the 40GB part's 1.555 TB/s peak). MI210 is a single MI210 (64 GB). Shapes: gemm C[m,n]=A[m,k]B[k,n]; "
        "bmm batch x (m,k)x(k,n). gpt3-175b rows (shapes from ae/figure5/ijkl/test_transformer.py and "
        "software_model/transformer.py): d=12288, 96 heads (24/GPU), TP=4, batch 8, prompt 2048; decode reads "
        "a KV cache of 3072+1 tokens. Q_K_V in the source is 3x one measured q projection -> stored once, divided by 3. "
        "LayerNorm rows have LLMCompass' launch-overhead estimate subtracted. The two allreduce values per phase "
        "are hand-entered in the csv (run_on_gpu sets allreduce to 0); numel counts fp16 elements (bytes/2). "
        "softmax/layernorm (4096,4096) appear in both sweeps (two measurements).",
    ]
    write_csv(os.path.join(a.out, "llmcompass.csv"), hdr, rows)
    written.append(("llmcompass.csv", rows))

    # ---- NeuSight per-op
    per_gpu, gpaths = neusight_ops(ns, checks)
    ns_note = (
        "notes: NeuSight neusight/Dataset/collect.py: inputs torch.randn/zeros default float32 "
        "(cudnn.allow_tf32=False; matmul TF32 off by PyTorch>=1.12 default; kernel names are *sgemm*/*_ffma_* on NVIDIA, "
        "Tensile Cijk_*_SB_* single-precision (MFMA f32 or FMA) on AMD; none matches tf32/half/bf16); each value = mean of the 5 fastest of 25 back-to-back calls timed "
        "by torch.cuda.Event around the op call (no separate warm-up; the sort drops it). Events bracket the host "
        "launch too, so tiny ops show a floor of roughly 5-30 us (GPU/host dependent). PyTorch 2.1.0+cu121 (NVIDIA), "
        "2.4.1 ROCm (AMD). Shape mapping: bmm x[B,M,N]@y[B,N,K] -> batch=B, m=M, k=N, n=K; linear = "
        "nn.Linear(N,K,bias=True) on x[B,M,N] -> gemm m=B*M, k=N, n=K (bias in the GEMM epilogue); softmax "
        "(dim=1) and layernorm (affine) on x[B,H] -> rows=B, cols=H; elementwise on [B,H] -> numel=B*H; add/mul/pow/"
        "div are tensor(op)tensor, addu/mulu/powu/divu are tensor(op)python-scalar; gelu = erf GELU; relu, tanh. "
        "conv = Conv2d(c,f,k,stride,pad,bias=False) on x[n,c,h,w], cudnn.benchmark=True (kernels=N in context counts "
        "launched kernels, e.g. winograd transforms). GPU names: a100-40gb = A100-PCIE-40GB, a100-80gb = A100 80GB "
        "PCIe, h100 = H100 80GB HBM3 (SXM5), v100 = V100-PCIE-32GB, p100 = P100-PCIE-16GB, mi250 = one GCD of an "
        "MI250/MI250X. Rows come from the training sweeps (train/collect/<op>/<ver>/<GPU>.csv) and the test sweeps "
        "(test/*.csv, dataset_amd/test/collect); the merged train files (train/ln.csv, elem.csv, ...) and "
        "test/vec.csv, test/habitat.csv are subsets/concatenations and were not re-imported. Not in the mirror "
        "(git blobs absent): AMD MI100/MI210 training bmm/linear sweeps. Rows with equal keys are kept as "
        "separate measurements: mostly elementwise rows whose different [B,H] share B*H, plus a few ln/softmax "
        "dims listed twice in the sweeps.")
    for gpu in sorted(per_gpu):
        rs = per_gpu[gpu]
        hdr = [
            f"source: {NS_REPO}",
            "path: " + "; ".join(gpaths[gpu]),
            f"commit: {ns.commit}",
            "units: " + UNITS_KERNEL + "; source column Latency is milliseconds (torch.cuda.Event.elapsed_time) x1000.",
            ns_note + (" h100 fp16 bmm rows: scripts/asplos/fp16mm.csv (fp16mm_exp.py, same timing method plus one "
                       "warm-up; the GPU is inferred from the H100 device config used for its prediction)."
                       if gpu == "h100" else ""),
        ]
        split_write(a.out, f"neusight_ops_{gpu}", hdr, rs, written)

    # ---- NeuSight model traces
    mrows, mpaths = neusight_models(ns, checks)
    gpus = sorted({r["gpu"] for r in mrows})
    hdr = [
        f"source: {NS_REPO}",
        "path: scripts/asplos/label/<GPU>/<model>-<inf|train>-<seqlen>-<batch>[-fusion].{csv,json} "
        f"({len(mpaths)} files; GPUs: {', '.join(gpus)})",
        f"commit: {ns.commit}",
        "units: " + UNITS_TRACE + "; source fw_latency is ms x1000. op=model_e2e rows are NOT kernels: time_us is "
        "one whole-model forward (inf) or forward+backward (train) call, e2e_latency ms x1000.",
        "notes: NeuSight collect_label.py / neusight/Tracing: HF transformers model (eager attention, fp32, random "
        "init) traced with torch.fx; every FX node re-run alone 25x and timed with torch.cuda.Event, mean of the 5 "
        "fastest. Traces are a ONE-layer model (n_layer/num_hidden_layers forced to 1) except switch*, which is the "
        "full model; the e2e rows use the full model (all layers). Kept FX nodes: nn.Linear/addmm/matmul/bmm "
        "(gemm m=tokens,k=in,n=out; 4-D matmul -> bmm batch=prod(leading dims)), softmax, LayerNorm, Embedding, "
        "ReLU/Tanh/gelu, float elementwise add/sub/mul/div/pow (suffix u = one operand scalar, as in NeuSight's "
        "dataset; broadcast operands keep the plain name), where, masked_fill, maximum, rsqrt, mean(rows x cols "
        "reduce), copy (contiguous/clone), dropout (train only; identity in eval so dropped). Dropped: view-like "
        "nodes (view/reshape/permute/transpose/expand/split/getitem), shape/int/bool bookkeeping, constructors. "
        "Train traces contribute forward times only (context train-fwd); their per-node backward sums "
        "(bw_latency/acc_latency) are several kernels each and are not imported. context = '<model> s=<seq> "
        "b=<batch> <inf|train-fwd> <module path>:<fx node>'. No kernel names are stored for traces; fp32 without TF32 "
        "is supported by the rates (e.g. h100 bert_large b=16 query gemm 8192x1024x1024 in 659 us = 26 TFLOP/s, far "
        "below TF32 tensor-core rates). Absent in the mirror: switchxl4 traces for A100-40GB, "
        "A100-80GB, H100, V100 (blobs too large); multi-GPU Megatron (dp4/tp4/pp4) e2e jsons are skipped.",
    ]
    split_write(a.out, "neusight_models", hdr, mrows, written)

    # ---- summary
    acc: collections.Counter = collections.Counter()
    for fname, rs in written:
        summarize(fname, rs, acc)
    print("file,gpu,op,dtype,rows")
    for k in sorted(acc):
        print(",".join(k) + f",{acc[k]}")
    print()
    for fname, rs in written:
        sz = os.path.getsize(os.path.join(a.out, fname))
        dups = collections.Counter(tuple(r[c] for c in COLS if c not in ("time_us", "context"))
                                   for r in rs)
        nd = sum(v - 1 for v in dups.values() if v > 1)
        print(f"{fname}: {len(rs)} rows, {sz} bytes, repeated (gpu,op,dtype,shape) keys: {nd}")
    for c in checks:
        print("check:", c)
    for mir in (llmc, ns):
        for p in mir.missing:
            print("absent in mirror:", p)
    print("commits:", llmc.commit, ns.commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
