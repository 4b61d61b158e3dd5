"""coral.research: paper -> repository reproduction (HiRAS, the PaperCoder baseline) and its judges.

    from coral.research.reproduce import run_hiras, run_papercoder
    from coral.research.judges import judge_repo

Design notes: docs/hiras.md. This package does NOT convert PDFs and does NOT train the agents; every
command a generated repository runs goes through coral.sandbox.
"""
