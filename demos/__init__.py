import demos._guard as _guard

_guard.install()  # python -m demos.<command>: SIGINT and SIGTERM are ours from here to the exit (demos._guard)
