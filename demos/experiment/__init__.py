"""One overlap experiment of the toy MoE: run it, and report it.

``run.run(config)`` returns typed results (``results``) and writes nothing; ``runner`` holds one
process's model, workspace and orchestrators; ``report`` and ``plot`` render a result.
"""
