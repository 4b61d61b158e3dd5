"""CoRe-Code: a planner writes a plan, a coder writes code from it (optional retriever and debugger in the
same chain); SFT cold start of each role, then role-aware GRPO where each role has its own reward.

config.py (CoReCodeConfig), data.py (cold-start data per role), setup.py (policies and agents),
rewards.py (credit along the chain), recipe.py (`train_corecode`, `rl_step`, `run_demo`), evaluate.py
(held-out sets before/after), fork.py (a run from another run's cold start). The chain workflow itself is
coral/workflows/chain.py (shared with `coral eval`); this package does NOT sample or judge code itself.
"""

from coral.corecode.config import CoReCodeConfig
from coral.corecode.recipe import run_demo, train_corecode

__all__ = ["CoReCodeConfig", "run_demo", "train_corecode"]
