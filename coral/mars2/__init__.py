"""MARS2: several agents grow one shared AB-MCTS-A tree per problem; tree-consistent reward shaping and a
path-level group advantage; each agent trains on its own nodes.

tree_select.py (AB-MCTS-A, UCT and best-of-N node choices), tree.py (the search over many trees at once),
tree_rewards.py (shaping and advantages, pure functions), recipe.py (`train_mars2`, `mars2_step`),
search.py (`coral search`), viewer.py (the trees as HTML). This package does NOT define the GRPO loss or
the run loop (coral/train).
"""

from coral.mars2.recipe import MARS2Config, train_mars2

__all__ = ["MARS2Config", "train_mars2"]
