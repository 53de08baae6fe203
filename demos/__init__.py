from demos._cli._early import guard_imports as _guard_imports

_guard_imports()  # python -m demos.<command>: Ctrl-C during the imports is one line (demos._cli._early)
