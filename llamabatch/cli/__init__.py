"""The ``llamabatch`` command line: one module per subcommand, the job's parts in ``job/``."""
