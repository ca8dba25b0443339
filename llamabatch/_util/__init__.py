"""Small private helpers shared by the layers: closing guards, signal handling in library calls."""
