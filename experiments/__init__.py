"""Learning studies: several seeds, settings chosen on the validation split, the test split reported once.

Run each from the repository root as `python -m experiments.<name>` (e.g. `python -m experiments.efficacy scaling`).
This package does NOT hold library code: what a study needs from coral it imports from `coral`.
"""
