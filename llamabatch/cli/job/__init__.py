"""The parts of a ``llamabatch complete`` job: input, output, report, signals, resume, runners."""
