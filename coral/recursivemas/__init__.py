"""RecursiveMAS: frozen HF agents collaborating through learned RecursiveLinks in latent space.

links.py (inner / outer links), rollout.py (KV-cached latent steps, slots, decoding), patterns.py,
system.py (rounds), train.py (inner and outer loops), evaluate.py (latent vs text MAS), latentmas.py
(training-free baseline), recipe.py (`coral train` with `recipe: recursivemas`, `eval_workflow`).
"""

from coral.recursivemas.config import RecursiveMASConfig
from coral.recursivemas.recipe import eval_run, eval_workflow, run_latent_eval, train_recursivemas

__all__ = ["RecursiveMASConfig", "eval_run", "eval_workflow", "run_latent_eval", "train_recursivemas"]
