"""Benchmarks of the planner (speed, scaling, optimality). See benchmarks/README.md."""
