#!/usr/bin/env python3
"""PyTorch's batch-1 latency on the exported benchmark networks: the bar loom's executor meets.

Prepare the models first (scripts/export-models.sh; default directory build/models), then:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
        python3 benchmarks/net/pytorch_baseline.py --threads 1,2 --mode all --json torch.json

How to run it correctly in this environment:

  * The environment pins OpenBLAS to a CPU type and L2 size (OPENBLAS_CORETYPE=Haswell,
    OPENBLAS_L2_SIZE) so that loom's own BLAS baselines are reproducible. PyTorch's Linear and
    MatMul go through that OpenBLAS, and the pin keeps it off its AVX-512 kernels: unset both
    for this command (as above), or PyTorch is measured slower than it is. The script warns
    when OPENBLAS_CORETYPE is set.
  * At 2 threads on a 2-core machine, GNU OpenMP's default (active) wait policy lets PyTorch's
    idle OpenMP workers spin against OpenBLAS's own pthreads and anything else running, which
    can cost PyTorch a lot. Two remedies, selected with --mode:
        default   PyTorch and OpenBLAS at T threads, environment as given.
        passive   the same with OMP_WAIT_POLICY=PASSIVE (--omp-passive is a shorthand). libgomp
                  reads it once, when torch is imported, so the script re-executes itself with
                  the variable set before importing torch.
        blas      PyTorch at 1 thread, OpenBLAS at T (what OPENBLAS_NUM_THREADS=T does; set at
                  run time with openblas_set_num_threads, so one process serves every T).
        all       runs the three modes above one after the other, each in its own process, and
                  prints the best median per model and thread count.
    The bar for loom is the best of these (--mode all prints it), not the default alone.
  * The machine is shared and has 2 cores: keep other work off it while measuring.

Contenders, alternated round-robin (one timed run of each per round) so that noise and
frequency drift hit both alike:
    eager        the nn.Module, under torch.inference_mode()
    torchscript  torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model)))

The models are rebuilt from scripts/export_models.py and load NAME.pt (their state_dict) from
--dir, so they carry the exported ONNX files' exact weights. Each contender's output is checked
against NAME.output.npy (max abs diff printed, and `rel`: that over max |reference|). GFLOP/s are shown when a FLOP count is known:
--flops name=value,... or a NAME.flops text file (one number) in --dir.

--json writes one record per model, thread count, mode and contender:
    {model, threads, mode, contender, median_ms, p10_ms, p90_ms, samples, gflops,
     max_abs_diff, max_rel_diff, omp_wait_policy}
where samples is the list of timed runs in ms (its length is --repeat).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_DIR = os.path.join(REPO_ROOT, 'build', 'models')
SYSTEM_PYTHON = '/usr/bin/python3'
MODES = ('default', 'passive', 'blas')
CONTENDERS = ('eager', 'torchscript')
REEXEC_MARK = 'LOOM_TORCH_BASELINE_REEXEC'


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--dir', default=DEFAULT_DIR, help='exported models (default: %(default)s)')
    parser.add_argument('--models', default='resnet18,resnet50,mobilenet_v2,bert_layer,dcgan')
    parser.add_argument('--threads', default='1,2', help='comma-separated thread counts')
    parser.add_argument('--repeat', type=int, default=50, help='timed runs per contender')
    parser.add_argument('--warmup', type=int, default=10, help='untimed runs per contender')
    parser.add_argument('--mode', default='default', choices=MODES + ('all',))
    parser.add_argument('--omp-passive', action='store_true', help='same as --mode passive')
    parser.add_argument('--flops', default='', help='FLOP counts: name=value,...')
    parser.add_argument('--json', help='write the records to this file')
    args = parser.parse_args()
    if args.omp_passive:
        if args.mode not in ('default', 'passive'):
            parser.error('--omp-passive contradicts --mode ' + args.mode)
        args.mode = 'passive'
    args.models = [m for m in args.models.split(',') if m]
    args.threads = [int(t) for t in args.threads.split(',') if t]
    if args.repeat < 1 or args.warmup < 0 or not args.threads or min(args.threads) < 1:
        parser.error('need --repeat >= 1, --warmup >= 0 and thread counts >= 1')
    return args


def reexec_if_needed(args):
    """Restarts this script, before torch is imported, when the interpreter or env must change.

    Both libgomp (OMP_WAIT_POLICY) and the choice of interpreter are fixed once torch is
    loaded, so this has to happen first. Debian's python3-torch is only visible to
    /usr/bin/python3, not to a pyenv/venv python3 that may come first on PATH.
    """
    if os.environ.get(REEXEC_MARK):
        return
    python = sys.executable
    if (importlib.util.find_spec('torch') is None and os.path.exists(SYSTEM_PYTHON)
            and os.path.realpath(python) != os.path.realpath(SYSTEM_PYTHON)):
        python = SYSTEM_PYTHON
    env = dict(os.environ)
    if args.mode == 'passive':
        env['OMP_WAIT_POLICY'] = 'PASSIVE'
    if python == sys.executable and env == os.environ:
        return
    env[REEXEC_MARK] = '1'
    os.execve(python, [python, os.path.abspath(__file__)] + sys.argv[1:], env)


def run_all_modes(args):
    """--mode all: one child process per mode (the env differs), then the best of them."""
    records = []
    for mode in MODES:
        with tempfile.NamedTemporaryFile(suffix='.json', delete=False) as f:
            out = f.name
        try:
            argv = [a for a in sys.argv[1:] if a != '--omp-passive']
            argv = strip_option(strip_option(argv, '--mode'), '--json')
            cmd = [sys.executable, os.path.abspath(__file__), *argv, '--mode', mode, '--json', out]
            print(f'== mode {mode}', flush=True)
            subprocess.run(cmd, check=True)
            with open(out) as f:
                records += json.load(f)
        finally:
            os.unlink(out)

    print('\nbest over modes and contenders (the bar for loom):')
    print(f'{"model":<14}{"threads":>8}  {"median ms":>10}  {"mode":<8} contender')
    best = {}
    for r in records:
        key = (r['model'], r['threads'])
        if key not in best or r['median_ms'] < best[key]['median_ms']:
            best[key] = r
    for (model, threads), r in sorted(best.items()):
        print(f'{model:<14}{threads:>8}  {r["median_ms"]:>10.3f}  {r["mode"]:<8} {r["contender"]}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(records, f, indent=1)


def strip_option(argv, name):
    """argv without `name value` / `name=value`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + '='):
            out.append(a)
    return out


def flop_counts(args):
    counts = {}
    for model in args.models:
        path = os.path.join(args.dir, model + '.flops')
        if os.path.exists(path):
            with open(path) as f:
                counts[model] = float(f.read().split()[0])
    for item in filter(None, args.flops.split(',')):
        name, value = item.split('=')
        counts[name] = float(value)
    return counts


def main():
    args = parse_args()
    if args.mode == 'all':
        return run_all_modes(args)
    reexec_if_needed(args)
    # After the re-exec, so that it is printed once per measuring process.
    for var in ('OPENBLAS_CORETYPE', 'OPENBLAS_L2_SIZE'):
        if var in os.environ:
            print(f'WARNING: {var}={os.environ[var]} is set: it pins OpenBLAS (PyTorch\'s BLAS) '
                  f'below its best for this CPU; run with '
                  f'`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`', flush=True)
    measure(args)


def measure(args):
    # Imported here, after reexec_if_needed(): see its comment.
    import ctypes
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(REPO_ROOT, 'scripts'))
    sys.dont_write_bytecode = True  # no scripts/__pycache__ in the source tree
    import export_models

    try:
        # The same library torch linked (Debian's pthread OpenBLAS behind libblas.so.3).
        openblas = ctypes.CDLL('libopenblas.so.0')
        openblas.openblas_get_corename.restype = ctypes.c_char_p
        blas_info = f'OpenBLAS core {openblas.openblas_get_corename().decode()}'
    except (OSError, AttributeError):
        openblas = None
        blas_info = 'OpenBLAS not found: its thread count follows its own defaults'
    omp_policy = os.environ.get('OMP_WAIT_POLICY', 'unset')
    print(f'torch {torch.__version__}, mode {args.mode}, OMP_WAIT_POLICY {omp_policy}, '
          f'{blas_info}', flush=True)

    flops = flop_counts(args)
    records = []
    header = (f'{"model":<14}{"thr":>4} {"mode":<8}{"contender":<12}{"median ms":>10}'
              f'{"p10 ms":>10}{"p90 ms":>10}{"GFLOP/s":>9}{"max|diff|":>11}{"rel":>11}')
    print(header)
    for name in args.models:
        model, x = export_models.load_exported(name, args.dir)
        reference = np.load(os.path.join(args.dir, name + '.output.npy'))
        # Diffs are also shown relative to the output's scale: ResNet-50's random-weight logits
        # reach ~1e3, where an abs diff of 1e-4 is float32 rounding, not an error.
        scale = max(float(np.abs(reference).max()), 1e-30)
        # Traced (all five models are static-shape, control-flow free) and frozen once: the
        # thread count is a run-time setting, not part of the optimized graph.
        with torch.no_grad():
            scripted = torch.jit.optimize_for_inference(
                torch.jit.freeze(torch.jit.trace(model, (x,)).eval()))
        runners = {'eager': model, 'torchscript': scripted}

        for threads in args.threads:
            torch.set_num_threads(1 if args.mode == 'blas' else threads)
            if openblas is not None:
                openblas.openblas_set_num_threads(threads)
            times = {c: [] for c in CONTENDERS}
            diffs = {}
            with torch.inference_mode():
                for c in CONTENDERS:
                    y = runners[c](x)
                    diffs[c] = float(np.abs(y.numpy() - reference).max())
                    for _ in range(args.warmup):
                        runners[c](x)
                for _ in range(args.repeat):
                    for c in CONTENDERS:
                        start = time.perf_counter()
                        runners[c](x)
                        times[c].append((time.perf_counter() - start) * 1e3)

            for c in CONTENDERS:
                t = np.array(times[c])
                median, p10, p90 = (float(np.percentile(t, q)) for q in (50, 10, 90))
                gflops = flops[name] / (median * 1e-3) / 1e9 if name in flops else None
                records.append(dict(model=name, threads=threads, mode=args.mode, contender=c,
                                    median_ms=median, p10_ms=p10, p90_ms=p90,
                                    samples=times[c], gflops=gflops, max_abs_diff=diffs[c],
                                    max_rel_diff=diffs[c] / scale, omp_wait_policy=omp_policy))
                rate = f'{gflops:9.1f}' if gflops is not None else f'{"-":>9}'
                print(f'{name:<14}{threads:>4} {args.mode:<8}{c:<12}{median:10.3f}{p10:10.3f}'
                      f'{p90:10.3f}{rate}{diffs[c]:11.2e}{diffs[c] / scale:11.2e}', flush=True)

    if args.json:
        with open(args.json, 'w') as f:
            json.dump(records, f, indent=1)


if __name__ == '__main__':
    main()
