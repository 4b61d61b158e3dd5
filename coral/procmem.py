"""Resident and peak memory of a process, read from /proc (Linux): what the speed benchmarks report.

The sandbox measures its candidates with the same readers (coral/sandbox/_measure.py, which must stay
stdlib-only because it runs inside the sandbox); this module is their public name outside it. It does
NOT measure GPU memory.
"""

from coral.sandbox._measure import proc_hwm_kb, proc_rss_kb, reset_peak

__all__ = ["proc_hwm_kb", "proc_rss_kb", "reset_peak"]
