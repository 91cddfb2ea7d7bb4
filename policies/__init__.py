"""Stopping rules, pair rules and allocation policies, registered by name.

This package is found by the core through the ``adaptive_eval.policies`` entry-point group;
adding a policy is one new module here (imported below) or in any installed package that
declares the same entry point.
"""

from policies import allocation, betting, pair_rules, stopping

__all__ = ["allocation", "betting", "pair_rules", "stopping"]
