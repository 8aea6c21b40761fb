"""Transient bytes and times on the profiled device.

Transient bytes are the largest net growth of allocated memory during a
region (a layer's forward or backward), relative to what was allocated when
it began:

- CUDA: ``torch.cuda.max_memory_allocated`` after resetting the peak, minus
  ``memory_allocated`` at the start (the caching allocator's accounting:
  sizes rounded up to 512 bytes).
- CPU: PyTorch's CPU allocator reports every allocation and free to the
  profiler (``torch.profiler.profile(profile_memory=True)``); the running sum
  of those events, in order, from the start of the region, and its maximum.
  Sizes are the bytes requested. Frees of tensors allocated before the region
  (a layer's saved activations, released as its backward runs) count as
  negative, so this is the net growth, as on CUDA.
"""
import statistics
import time

import torch


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats):
    """Median seconds of fn() over repeats runs (after one warm-up)."""
    fn()
    out = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


class Peak:
    """Net peak growth of allocated bytes while the block runs, and the net
    growth at its end: ``with Peak(device) as p: ...; p.peak, p.end``."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.peak = 0
        self.end = 0

    def __enter__(self):
        if self.device.type == "cuda":
            sync(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            sync(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self._base
            self.end = torch.cuda.memory_allocated(self.device) - self._base
        else:
            self._prof.__exit__(*exc)
            self.peak, self.end = cpu_peak(self._prof)
        return False


def cpu_peak(prof):
    """(max running sum, final sum) of the profiler's CPU memory events."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events = [e for e in events if str(e.device_type()).endswith("CPU")]
    # stable: events of the same instant keep the order they were recorded in
    events.sort(key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us())
    run = peak = 0
    for e in events:
        run += e.nbytes()
        peak = max(peak, run)
    return peak, run
