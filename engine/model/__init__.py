"""The types every layer shares; this package imports nothing of the engine above `engine.base`.

Data walks one way: suite loader -> Test -> runner -> client -> Answer -> evaluators -> Verdict -> results.
Nothing here does I/O. Each module holds one concept; import a name from the module that defines it.
"""
