"""The two interpreters of a Program: execute (values, through the backend
family's interpreter) and cycles (time).

The functions live in their modules (`pimjax.sim.execute.execute`,
`pimjax.sim.cycles.cycles`; top level `pimjax.execute`, `pimjax.cycles`):
nothing here shadows a submodule, so `pimjax.sim.execute` is the module."""
