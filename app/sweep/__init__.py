"""`rampwatch sweep`: one scenario ramped against a server started with each of several
sets of serve arguments, and the table that compares them.

- ``spec``: the sweep file read and checked, its matrix expanded into configurations;
- ``serve_args``: a configuration's arguments put into the serve command, and its label;
- ``early_stop``: the sink that stops a configuration's load past its knee;
- ``state``: ``sweep.json``, what the end prints, ``--resume`` continues and the live view draws;
- ``run``: the headless sweep, one configuration after another;
- ``live``: the live view over a headless sweep in a child process;
- ``cli``: the flags, and the choice between the two.

The figures of a configuration's run, the Pareto front, the best configuration and the
table's words are ``rampwatch.core.figures.sweep`` and ``sweep_text``; the simulator's
flags in vLLM's spelling are ``rampwatch.sim.serve_flags``.
"""
