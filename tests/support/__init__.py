"""Helpers shared by the test packages (import them as ``from tests.support.<module> import ...``).

``timing`` (the ``DBO_TEST_SLACK`` factor for wall-clock bounds, ``wait_until``), ``orchestrators``
(bounded orchestrators, the CPU backends and stream layouts), ``faults`` (the injected exception),
``threads`` (ubatch threads without an orchestrator), ``views`` (byte addresses and canaries of
tensor views), ``isolation`` (the cross-ubatch isolation checker), ``workspace_fixtures`` (the
workspace manager and sanitizer fixtures), ``profiles`` (small device profiles and samples),
``paths`` (the repository root, a subprocess's environment), ``controlled_scheduler`` (systematic
interleaving exploration), and the two mutation harnesses, ``mutation_pass`` and ``race_mutants``.
"""
