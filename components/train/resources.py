"""What a training run measures of its machine: GPU utilization (NVML), peak memory, and the
bottleneck flags with a recommendation each.
"""

from __future__ import annotations

import resource
import threading

import numpy as np
import torch


class GpuSampler:
    """Samples GPU utilization with NVML in a thread, where nvidia-ml-py finds a GPU."""

    def __init__(self, device: torch.device, interval: float = 0.5) -> None:
        self.samples: list[float] = []
        self._seen = 0  # samples already averaged by recent()
        self._stop = threading.Event()
        self._thread = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except Exception:  # no NVML library or no permission: no samples, not an error
            return

        def run():
            while not self._stop.wait(interval):
                self.samples.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        self._stop.set()
        return float(np.mean(self.samples)) if self.samples else None

    def recent(self) -> float | None:
        """Mean utilization since the previous call (None without samples)."""
        samples, self._seen = self.samples[self._seen :], len(self.samples)
        return float(np.mean(samples)) if samples else None


def peak_memory(device: torch.device) -> tuple[int, int | None]:
    """(peak bytes, device capacity bytes): CUDA max allocated, else this process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), torch.cuda.get_device_properties(
            device
        ).total_memory
    import psutil

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, psutil.virtual_memory().total


def diagnose(
    data_wait: float, gpu_util: float | None, peak: int, capacity: int | None
) -> list[dict]:
    """Bottleneck flags with a one-line recommendation each (the tuning guides' checklist)."""
    flags = []
    if data_wait > 0.10:
        flags.append(
            {
                "flag": "data_starved",
                "value": round(data_wait, 3),
                "recommendation": "the step waits for data over 10% of the time: raise num_workers "
                "or prefetch_factor, or move the dataset to faster local disk",
            }
        )
    if gpu_util is not None and gpu_util < 70:
        flags.append(
            {
                "flag": "gpu_underutilized",
                "value": round(gpu_util, 1),
                "recommendation": "GPU utilization under 70%: raise micro_batch (the plan's memory "
                "headroom allows it) or num_workers",
            }
        )
    if capacity and peak > 0.9 * capacity:
        flags.append(
            {
                "flag": "memory_high",
                "value": round(peak / capacity, 3),
                "recommendation": "peak memory above 90% of the device: enable activation "
                "checkpointing or lower micro_batch",
            }
        )
    return flags
