"""The two interpreters of a Program: `execute.execute` (values, through the
backend family's interpreter) and `cycles.cycles` (time)."""
