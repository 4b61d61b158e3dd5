"""coral.hiras: paper -> repository reproduction (HiRAS, the PaperCoder baseline) and its judges.

    from coral.hiras.reproduce import run_hiras, run_papercoder
    from coral.hiras.judges import judge_repo

Design notes: docs/hiras.md. This package does NOT convert PDFs and does NOT train the agents; every
command a generated repository runs goes through coral.sandbox.
"""
